"""OpenAI's ``prompt_cache_key`` on the requests the proxy rewrites: the official
openai client, a real proxy and the mock providers, asserting what the provider received.

What a user notices: every request of a conversation the proxy compacts reaches the provider
under one key of its own (derived, never the conversation id), from the first request on, so
they share the provider's cache routing; a client's own key is kept; a request the proxy leaves
alone goes out as the client's bytes; a policy can switch it off.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.clients import KEY, openai_client
from tests.support.config import AGENT_RUN, EVERY_THREE_INTERACTIONS, summarizing
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import SYSTEM, Provider, take_turn, tool_output
from tests.support.responses_provider import (
    DEVELOPER,
    INSTRUCTIONS,
    TASK,
    TOOLS,
    ResponsesProvider,
)

DERIVED = re.compile(r"cpx-[0-9a-f]{32}")


def chat_run(server: Any, conversation: str = "conv-1", key: str = KEY, turns: int = 8, **extra):
    """``turns`` user turns of one conversation; the X-Compaction outcome of each request."""
    client = openai_client(server, conversation, key=key)
    history: list[dict[str, Any]] = [SYSTEM]
    outcomes = []
    for turn in range(turns):
        text = f"Step {turn}: fix src/m{turn}.py. " + "Be thorough. " * 12  # worth a summary
        headers = take_turn(client, history, text, **extra)
        outcomes += [h["x-compaction"] for h in headers]
    return outcomes


def keys_sent(provider: Provider) -> list[object]:
    """The prompt_cache_key of each conversation request the provider received (None: none)."""
    return [body.get("prompt_cache_key") for body in provider.chat_requests()]


def test_a_compacted_conversation_reaches_the_provider_under_one_derived_key(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    outcomes = chat_run(server)
    keys = keys_sent(provider)

    assert outcomes.count("applied") >= 3 and outcomes[0] != "applied"
    # On every request, from the first: those sent before the first summary too.
    assert len(keys) == len(outcomes) and set(keys) == {keys[0]}
    assert isinstance(keys[0], str) and DERIVED.fullmatch(keys[0]), keys[0]
    # The summarizer's own calls are not the conversation's: no key.
    assert all("prompt_cache_key" not in body for body in provider.summary_requests())


def test_the_key_is_derived_per_tenant_and_conversation_never_the_id(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    chat_run(server, "conv-1")
    first = {k for k in keys_sent(provider) if k is not None}
    mock.received.clear()
    chat_run(server, "conv-2")
    second = {k for k in keys_sent(provider) if k is not None}
    mock.received.clear()
    chat_run(server, "conv-1", key="sk-caller-two")  # the same id under another tenant
    third = {k for k in keys_sent(provider) if k is not None}
    mock.received.clear()
    chat_run(server, "conv-1")  # the first conversation again: the same key
    again = {k for k in keys_sent(provider) if k is not None}

    assert len(first) == len(second) == len(third) == 1
    assert len(first | second | third) == 3
    assert again == first
    assert not any("conv" in key for key in first | second | third)


def test_a_clients_own_key_is_never_replaced(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    outcomes = chat_run(server, prompt_cache_key="the-clients-own")

    assert "applied" in outcomes
    assert set(keys_sent(provider)) == {"the-clients-own"}


def test_a_client_that_sends_null_keeps_its_null(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    outcomes = chat_run(server, extra_body={"prompt_cache_key": None})

    assert "applied" in outcomes
    assert all(
        "prompt_cache_key" in body and body["prompt_cache_key"] is None
        for body in provider.chat_requests()
    )


def test_a_policy_may_switch_it_off(mock: MockUpstream, provider: Provider, start_proxy) -> None:
    policy = {**EVERY_THREE_INTERACTIONS, "prompt_cache_key": False}
    server = start_proxy(summarizing(mock.url, policy=policy))
    outcomes = chat_run(server)

    assert "applied" in outcomes
    assert keys_sent(provider) == [None] * len(outcomes)


@pytest.mark.parametrize("conversation", [None, "conv-off"])
def test_requests_the_proxy_leaves_alone_stay_byte_identical(
    mock: MockUpstream, provider: Provider, start_proxy, conversation: str | None
) -> None:
    """No conversation id, or X-Compaction: off: the client's bytes, no key added."""
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    messages = [SYSTEM, *({"role": "user", "content": f"turn {n}"} for n in range(12))]
    raw = httpx.Request("POST", "/", json={"model": "gpt-4o", "messages": messages}).content
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    if conversation is not None:
        headers |= {"x-conversation-id": conversation, "x-compaction": "off"}
    response = httpx.post(f"{server.url}/v1/chat/completions", content=raw, headers=headers)

    assert response.status_code == 200
    assert response.headers["x-compaction"] == "off"
    assert mock.received[-1].body == raw


def test_responses_requests_carry_it_too(mock: MockUpstream, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=AGENT_RUN))
    api = openai_client(server, None)
    history: list[dict[str, Any]] = [DEVELOPER, TASK]
    outcomes = []
    for _ in range(24):
        raw = api.responses.with_raw_response.create(
            model="gpt-4o",
            instructions=INSTRUCTIONS,
            input=history,
            tools=TOOLS,
            store=False,
            extra_headers={"X-Conversation-Id": "agent-1"},
        )
        outcomes.append(raw.headers["x-compaction"])
        for item in raw.parse().output:
            history.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                output = tool_output(len(history))
                history.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )

    sent = provider.responses_requests()
    keys = [body.get("prompt_cache_key") for body in sent]
    assert "applied" in outcomes
    assert len(keys) == len(outcomes) and set(keys) == {keys[0]}  # from the first request on
    assert isinstance(keys[0], str) and DERIVED.fullmatch(keys[0]), keys[0]
