"""``strategy: native`` on /v1/responses and chat completions, driven by the official openai
client through a real proxy: what the provider received, what the client was told."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.clients import KEY, openai_client
from tests.support.config import summarizing
from tests.support.native_provider import NativeProvider
from tests.support.responses_provider import INSTRUCTIONS, ResponsesProvider, long_input
from tests.support.settle import settle

NATIVE = {
    "strategy": "native",
    "trigger": {"input_tokens": 50, "context_fraction": 0},
    "keep": {"interactions": 1},
}
ASKED = [{"type": "compaction", "compact_threshold": 50}]


def _create(server: Any, key: str = KEY, **extra: Any) -> Any:
    fields = {"model": "gpt-4o", "instructions": INSTRUCTIONS, "input": long_input(), **extra}
    return openai_client(server, "native-1", key=key).responses.with_raw_response.create(**fields)


@pytest.mark.parametrize("stream", [False, True])
def test_native_asks_the_provider_to_compact_and_reports_what_it_did(
    mock, start_proxy, stream
) -> None:
    provider = ResponsesProvider(mock)
    NativeProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=NATIVE))
    raw = _create(server, stream=stream)
    sent = provider.responses_requests()[-1]
    assert sent["context_management"] == ASKED
    assert sent["input"] == long_input()  # the provider compacts: the proxy cuts nothing
    assert raw.headers["x-compaction-strategy"] == "native"
    if stream:
        events = [event.type for event in raw.parse()]
        assert "response.completed" in events
        assert raw.headers["x-compaction"] == "delegated"
        assert raw.headers["x-compaction-native"] == "requested"
    else:
        response = raw.parse()
        assert response.output[0].type == "compaction"
        assert raw.headers["x-compaction"] == "applied"
        assert raw.headers["x-compaction-native"] == "compaction=1"


def test_the_clients_own_context_management_wins(mock, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    NativeProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=NATIVE))
    theirs = [{"type": "compaction", "compact_threshold": 100_000}]
    raw = _create(server, extra_body={"context_management": theirs})
    assert provider.responses_requests()[-1]["context_management"] == theirs
    assert raw.headers["x-compaction"] == "skipped"
    assert raw.headers["x-compaction-native"] == "none"


def test_a_provider_refusing_the_field_answers_the_plain_request(mock, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    native = NativeProvider(mock, rejects=True)
    server = start_proxy(summarizing(mock.url, policy=NATIVE))
    raw = _create(server)
    assert raw.parse().output[0].type == "message"  # an answer, not the provider's complaint
    assert raw.headers["x-compaction-native"] == "refused"
    first, retried = provider.responses_requests()[-2:]
    assert "context_management" in first and "context_management" not in retried
    # Remembered for the model: the next request runs the fallback, no field sent.
    raw = _create(server)
    assert "context_management" not in provider.responses_requests()[-1]
    assert native.refused == 1
    assert raw.headers["x-compaction-strategy"] == "summarize"


def test_a_tenants_own_bad_field_leaves_native_on_for_everyone(mock, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    native = NativeProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=NATIVE))
    with pytest.raises(openai.BadRequestError) as refused:
        _create(server, extra_body={"context_management": [{"type": "bogus_9"}]})
    assert refused.value.param == "context_management"  # the provider's word on their mistake
    raw = _create(server, key="sk-another-tenant")
    assert provider.responses_requests()[-1]["context_management"] == ASKED
    assert raw.headers["x-compaction-strategy"] == "native"
    assert native.refused == 0


@pytest.mark.parametrize("policy", [NATIVE, {**NATIVE, "strategy": "summarize"}])
def test_previous_response_id_chains_are_compacted_under_native_only(
    mock, start_proxy, policy
) -> None:
    provider = ResponsesProvider(mock)
    NativeProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=policy))
    item = {"type": "function_call_output", "call_id": "call_x", "output": "ok " * 200}
    raw = _create(server, previous_response_id="resp_earlier", input=[item])
    sent = provider.responses_requests()[-1]
    if policy["strategy"] == "native":
        assert sent["context_management"] == ASKED
        assert raw.headers["x-compaction"] == "applied"
    else:
        assert "context_management" not in sent
        assert raw.headers["x-compaction"] == "off"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_under_native_run_the_fallback(mock, start_proxy, stream) -> None:
    from tests.support.provider import Provider

    provider = Provider(mock)
    policy = {**NATIVE, "native": {"fallback": "trim"}, "keep": {"interactions": 1}}
    server = start_proxy(summarizing(mock.url, policy=policy))
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(4):
        history += [
            {"role": "user", "content": f"question {turn} " + "words " * 30},
            {"role": "assistant", "content": f"answer {turn}"},
        ]
    history.append({"role": "user", "content": "last question"})
    raw = openai_client(server, "chat-native").chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=stream
    )
    assert raw.headers["x-compaction-strategy"] == "trim"
    assert raw.headers["x-compaction"] == "applied"
    sent = [r.json() for r in mock.received if r.path.endswith("/chat/completions")][-1]
    assert "context_management" not in sent
    assert len(sent["messages"]) < len(history)
    assert provider is not None


def test_an_overflow_under_native_is_rescued_with_the_shadow_summary(mock, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    NativeProvider(mock)
    shadowed = {
        **NATIVE,
        "trigger": {"interactions": 2, "context_fraction": 0},
        "native": {"shadow_summary": True},
    }
    server = start_proxy(summarizing(mock.url, policy=shadowed))
    history = long_input()
    api = openai_client(server, "shadow-rescue", key=KEY)
    raw = api.responses.with_raw_response.create(model="gpt-4o", input=history)
    assert raw.headers["x-compaction-strategy"] == "native"
    settle(server.url, route="responses", answered=1)
    assert provider.chat.summaries == 1  # the shadow, made after the answer
    sent = provider.responses_requests()[-1]
    assert sent["input"] == history  # never sent
    provider.max_items = len(history) - 4
    raw = api.responses.with_raw_response.create(model="gpt-4o", input=history)
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"
    retried = provider.responses_requests()[-1]
    assert "context_management" not in retried
    assert len(retried["input"]) <= provider.max_items
    assert "<agent_summary>" in json.dumps(retried["input"])
