"""``strategy: native`` on /v1/messages, driven by the official anthropic client through a real
proxy: the edits and beta flags the provider received, merged with the client's,
what the client was told, the fallback when the provider refuses, and the shadow summary."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.clients import admin_get
from tests.support.config import merged, summarizing
from tests.support.native_provider import CLEARING_BETA, COMPACT_BETA, NativeProvider
from tests.support.provider import Provider
from tests.support.sdk_clients import closed_after_test
from tests.support.settle import settle, wait_until

KEY = "sk-ant-caller-one"
MODEL = "claude-mock-1"
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
NATIVE = {
    "strategy": "native",
    "trigger": {"input_tokens": 60, "context_fraction": 0},
    "keep": {"interactions": 0},
    "clear_tool_results": {"clear_at_least": 10},
    "native": {"exclude_tools": ["memory"]},
}


def _history(rounds: int) -> list[dict[str, Any]]:
    """A tool run: the task, then ``rounds`` read_file calls with their (long) results."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "TOOL: read the sources"}]
    for n in range(rounds):
        use = {
            "type": "tool_use",
            "id": f"toolu_{n}",
            "name": "read_file",
            "input": {"path": f"f{n}"},
        }
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "line\n" * 60}
        history += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return history


@pytest.fixture
def serve(mock, second_mock, start_proxy):
    Provider(mock)  # the summarizer
    AnthropicProvider(second_mock)

    def start(policy: dict[str, Any] = NATIVE, **sections: Any):
        to_anthropic = {"upstream": {"anthropic_base_url": second_mock.url}}
        return start_proxy(summarizing(mock.url, policy=policy, **merged(to_anthropic, sections)))

    return start


def _client(server: Any, conversation: str = "native-a", key: str = KEY) -> anthropic.Anthropic:
    return closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key=key,
            max_retries=0,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def _sent(second_mock) -> Any:
    return [r for r in second_mock.received if r.path == "/v1/messages"][-1]


@pytest.mark.parametrize("stream", [False, True])
def test_native_adds_the_edits_and_their_beta_flags_and_reports_them(
    serve, second_mock, stream
) -> None:
    NativeProvider(second_mock)
    server = serve()
    # The client's own compaction edit (a low trigger) wins; the proxy adds the clearing.
    theirs = {
        "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50}}]
    }
    raw = _client(server).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=100,
        tools=TOOLS,
        messages=_history(5),
        stream=stream,
        extra_body={"context_management": theirs},
        extra_headers={"anthropic-beta": COMPACT_BETA},
    )
    sent = _sent(second_mock)
    edits = sent.json()["context_management"]["edits"]
    assert edits[0] == theirs["edits"][0]
    assert edits[1] == {
        "type": "clear_tool_uses_20250919",
        "keep": {"type": "tool_uses", "value": 1},
        "trigger": {"type": "input_tokens", "value": 60},
        "clear_at_least": {"type": "input_tokens", "value": 10},
        "exclude_tools": ["memory"],
    }
    assert sent.headers["anthropic-beta"] == f"{COMPACT_BETA},{CLEARING_BETA}"
    assert len(sent.json()["messages"]) == len(_history(5))
    assert raw.headers["x-compaction-strategy"] == "native"
    if stream:
        kinds = [event.type for event in raw.parse()]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert raw.headers["x-compaction"] == "delegated"
    else:
        message = raw.parse()
        assert message.content[0].type == "compaction"
        assert raw.headers["x-compaction"] == "applied"
        detail = raw.headers["x-compaction-native"]
        assert detail.startswith("clear_tool_uses_20250919=4 tool uses/")
        assert detail.endswith("; compaction=1")


def test_native_reports_to_the_metrics_and_the_ledger(serve, second_mock) -> None:
    NativeProvider(second_mock)
    server = serve()
    _client(server, "ledgered").messages.create(
        model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(5), stream=True
    )
    settle(server.url, route="messages", answered=1)
    metrics = httpx.get(f"{server.url}/metrics").text
    assert (
        'proxy_native_edits_total{edit="clear_tool_uses_20250919",route="messages"} 1.0' in metrics
    )
    path = "/conversations/ledgered/ledger"
    assert wait_until(lambda: admin_get(server, path, key=KEY).status_code == 200)
    ledger = admin_get(server, path, key=KEY).json()["ledger"]
    assert ledger["requests"] == 1
    # The direct run would have sent what the provider cleared too.
    assert ledger["full_prompt_tokens"] > ledger["prompt_tokens"]


def test_a_provider_refusing_the_edits_answers_the_plain_request(serve, second_mock) -> None:
    native = NativeProvider(second_mock, rejects=True)
    server = serve()
    api = _client(server)
    message = api.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2))
    assert message.content[-1].type == "tool_use"  # the provider's answer, not its complaint
    first, retried = [r for r in second_mock.received if r.path == "/v1/messages"][-2:]
    assert "context_management" in first.json()
    assert "context_management" not in retried.json()
    assert "anthropic-beta" not in retried.headers
    api.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2))
    assert native.refused == 1


def test_a_shadow_summary_is_stored_and_never_sent(serve, mock, second_mock) -> None:
    NativeProvider(second_mock)
    policy = merged(NATIVE, {"native": {"shadow_summary": True}, "soft_fraction": 0.5})
    server = serve(policy)
    api = _client(server, "shadowed")
    for rounds in (3, 4, 5):
        api.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(rounds))
    settle(server.url, route="messages", answered=3)
    checkpoints = admin_get(server, "/conversations/shadowed", key=KEY).json()["checkpoints"]
    assert checkpoints and "<agent_summary>" not in str(_sent(second_mock).json())
    assert len(_sent(second_mock).json()["messages"]) == len(_history(5))


TENANT_FAULTS = {
    "their own beta flag": {"extra_headers": {"anthropic-beta": "no-such-beta-2099"}},
    "their own edits": {"extra_body": {"context_management": {"edits": [{"type": "bogus_9"}]}}},
}


@pytest.mark.parametrize("fault", TENANT_FAULTS.values(), ids=TENANT_FAULTS.keys())
def test_a_tenants_own_bad_request_leaves_native_on_for_everyone(serve, second_mock, fault) -> None:
    native = NativeProvider(second_mock)
    server = serve()
    with pytest.raises(anthropic.BadRequestError) as refused:
        _client(server, "careless").messages.create(
            model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2), **fault
        )
    named = "anthropic-beta" if "extra_headers" in fault else "context_management"
    assert named in str(refused.value)  # the provider's word on their own mistake
    # Another tenant's next request still gets the provider's context management.
    _client(server, "careful", key="sk-ant-caller-two").messages.create(
        model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2)
    )
    assert "context_management" in _sent(second_mock).json()
    assert native.refused == 0
    assert "proxy_native_refusals_total{" not in httpx.get(f"{server.url}/metrics").text


def test_a_refusal_is_remembered_only_once_the_request_without_the_fields_is_answered(
    serve, second_mock
) -> None:
    native = NativeProvider(second_mock, rejects=True)
    server = serve()
    api = _client(server)
    # The plain retry fails too (the history is invalid without the fields as with them): the
    # refusal is not confirmed, so the next request asks for context management again.
    broken = [{"role": "assistant", "content": "not a first turn"}, *_history(1)]
    with pytest.raises(anthropic.BadRequestError):
        api.messages.create(model=MODEL, max_tokens=100, messages=broken)
    api.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2))
    assert native.refused == 2
    api.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2))
    assert native.refused == 2  # confirmed by the answered retry: remembered


@pytest.mark.parametrize("stream", [False, True])
def test_an_applied_edit_with_counts_that_are_not_numbers_is_relayed(
    serve, second_mock, stream, caplog
) -> None:
    native = NativeProvider(second_mock)

    def garbled(request: Any) -> Any:
        reply = native(request)
        odd = rb'"cleared_tool_uses": "four", "cleared_input_tokens": {"n": 1}'
        counts = re.compile(rb'"cleared_tool_uses": \d+, "cleared_input_tokens": \d+')
        chunks = [counts.sub(odd, c) if isinstance(c, bytes) else c for c in reply.chunks]
        return replace(reply, chunks=chunks)

    second_mock.default = garbled
    server = serve()
    with caplog.at_level(logging.ERROR, logger="proxy"):
        raw = _client(server, "garbled").messages.with_raw_response.create(
            model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(5), stream=stream
        )
        assert raw.status_code == 200
        if stream:
            assert [event.type for event in raw.parse()][-1] == "message_stop"
        else:
            assert raw.parse().content[-1].type == "tool_use"
            assert raw.headers["x-compaction-native"].startswith("clear_tool_uses_20250919=0 ")
        settle(server.url, route="messages", answered=1)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'proxy_native_edits_total{edit="clear_tool_uses_20250919",route="messages"} 1.0' in (
        metrics
    )


def test_a_refusal_one_tenant_causes_is_remembered_for_that_tenant_only(serve, second_mock) -> None:
    """A tenant on an old ``anthropic-version`` gets the proxy's fields refused (they name only
    what the proxy sent, and the request without them is answered): confirmed, yet the
    provider's answer to that tenant says nothing of what it answers the others."""
    native = NativeProvider(second_mock)
    server = serve()
    old = _client(server, "old-api", key="sk-ant-caller-old").with_options(
        default_headers={"anthropic-version": "2023-01-01"}
    )
    for _ in range(2):
        old.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2))
    assert native.refused == 1  # remembered for that tenant after one refusal
    _client(server, "current-api").messages.create(
        model=MODEL, max_tokens=100, tools=TOOLS, messages=_history(2)
    )
    assert "context_management" in _sent(second_mock).json()
