"""What the proxy adds to a conversation's requests must not move the provider's cached prefix:
the official openai and anthropic clients, a real proxy and the mock providers, asserting what
the provider received on every request of one conversation.

Providers render the tools before the messages, and OpenAI routes a request by its
``prompt_cache_key`` too. What a user notices: the key the proxy sets is on every request of
the conversation from the first one it sees, not only from its first compaction (a key that
appears mid-conversation sends the next request away from the warm cache); and once the recall
tool has been offered, every later request carries it with the same bytes (a tool that comes and
goes near a threshold makes the provider bill the whole prompt again, each time).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.cache_key import DERIVED
from tests.support.clients import KEY, openai_client
from tests.support.config import AGENT_RUN, summarizing
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import SYSTEM, TOOLS, Provider, take_turn
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

RECALL = "context_recall"
# Summarized past 3,000 tokens, the newest 1,500 kept: a conversation of short turns grows back
# to the trigger every few turns, so its compacted prompt passes near it again and again.
NEAR_THRESHOLD = {**AGENT_RUN, "keep": {"tokens": 1500}}


def short_turns(server: ThreadedUvicorn, turns: int) -> list[str]:
    """``turns`` user turns of about 170 tokens; the X-Compaction outcome of each request."""
    client = openai_client(server, "prefix-1")
    history: list[dict[str, Any]] = [SYSTEM]
    outcomes = []
    for turn in range(turns):
        text = f"Step {turn}: rename the helper in src/m{turn}.py. " + "Keep it small. " * 40
        outcomes += [h["x-compaction"] for h in take_turn(client, history, text)]
    return outcomes


def tool_bytes(body: dict[str, Any], name_of: Any) -> tuple[str, bool]:
    """The tools the provider received, as bytes, and whether the recall tool is among them."""
    tools = body.get("tools") or []
    return json.dumps(tools), any(name_of(t) == RECALL for t in tools)


def check_tool_stays(bodies: list[dict[str, Any]], name_of: Any, client_tools: list) -> None:
    """From the first request that carried the recall tool on, every request carries the same
    tools, byte for byte; the client's own tools first, as it sent them."""
    seen = [tool_bytes(body, name_of) for body in bodies]
    offered = [n for n, (_, recall) in enumerate(seen) if recall]
    assert offered, "the recall tool was never offered: nothing to check"
    first = offered[0]
    assert [recall for _, recall in seen[first:]] == [True] * (len(seen) - first)
    assert {tools for tools, _ in seen[first:]} == {seen[first][0]}
    for body in bodies:
        assert body["tools"][: len(client_tools)] == client_tools


def test_the_cache_key_is_on_every_request_from_the_first(mock: MockUpstream, start_proxy) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=NEAR_THRESHOLD))
    outcomes = short_turns(server, 24)
    keys = [body.get("prompt_cache_key") for body in provider.chat_requests()]

    assert outcomes[0] != "applied" and "applied" in outcomes  # compacted part-way through
    assert len(keys) == len(outcomes)
    assert isinstance(keys[0], str) and DERIVED.fullmatch(keys[0]), keys[0]
    assert set(keys) == {keys[0]}  # one key, on every request, from the first


def test_once_offered_the_recall_tool_stays_on_every_request(
    mock: MockUpstream, start_proxy
) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=NEAR_THRESHOLD))
    outcomes = short_turns(server, 40)

    assert outcomes.count("applied") >= 10
    check_tool_stays(provider.chat_requests(), lambda t: t["function"]["name"], TOOLS)


ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def test_messages_keep_the_recall_tool_too(
    mock: MockUpstream, second_mock: MockUpstream, start_proxy
) -> None:
    Provider(mock)  # the summarizer
    provider = AnthropicProvider(second_mock)
    settings = summarizing(
        mock.url, policy=NEAR_THRESHOLD, upstream={"anthropic_base_url": second_mock.url}
    )
    server = start_proxy(settings)
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key="sk-ant-caller-one",
            max_retries=0,
            default_headers={"X-Conversation-Id": "prefix-messages"},
        )
    )
    messages: list[dict[str, Any]] = []
    outcomes = []
    for turn in range(40):
        text = f"Step {turn}: rename the helper in src/m{turn}.py. " + "Keep it small. " * 40
        messages.append({"role": "user", "content": text})
        raw = client.messages.with_raw_response.create(
            model="claude-mock-1",
            max_tokens=256,
            system="You are a careful coding agent.",
            tools=ANTHROPIC_TOOLS,
            messages=messages,
        )
        outcomes.append(raw.headers["x-compaction"])
        messages.append({"role": "assistant", "content": raw.parse().content[0].text})

    assert outcomes.count("applied") >= 10
    check_tool_stays(provider.requests(), lambda t: t["name"], ANTHROPIC_TOOLS)


def test_a_request_sent_as_it_came_gains_only_the_key(mock: MockUpstream, start_proxy) -> None:
    """A request the plan leaves as it is: the client's bytes, the key inserted before them,
    never the body encoded again (its spacing, key order and escapes as the client wrote)."""
    Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=NEAR_THRESHOLD))
    raw = b'{ "model": "gpt-4o",\n  "messages": [{"role": "user", "content": "caf\\u00e9"}]}'
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {KEY}",
        "x-conversation-id": "as-it-came",
    }
    response = httpx.post(f"{server.url}/v1/chat/completions", content=raw, headers=headers)

    assert response.status_code == 200
    assert response.headers["x-compaction"] != "applied"
    received = mock.received[-1].body
    assert received.startswith(b'{"prompt_cache_key":"cpx-') and received.endswith(raw[1:])
    key = json.loads(received)["prompt_cache_key"]
    assert DERIVED.fullmatch(key) and received == b'{"prompt_cache_key":"%s",%s' % (
        key.encode(),
        raw[1:],
    )
