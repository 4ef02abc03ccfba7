"""Pins through a real proxy, driven by the official clients: what the provider
receives holds every pinned message verbatim and in order, the summary covers the rest, a
pinned tool result is never stubbed, and pins that alone overflow the window get the provider's
own overflow answer rather than a silent drop.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.dialects.test_anthropic_messages import anthropic_client
from tests.support.anthropic_provider import AnthropicProvider, summaries_in
from tests.support.clients import openai_client
from tests.support.config import EVERY_THREE_INTERACTIONS, summarizing
from tests.support.provider import SYSTEM, Provider, take_turn

SUMMARY = "<agent_summary>"


def summary_positions(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if str(m.get("content")).startswith(SUMMARY)]


def test_every_user_message_pinned_reaches_the_provider_verbatim_and_in_order(
    mock, start_proxy
) -> None:
    provider = Provider(mock)
    policy = {**EVERY_THREE_INTERACTIONS, "pin": ['role == "user"']}
    client = openai_client(start_proxy(summarizing(mock.url, policy=policy)), "pins")
    history = [SYSTEM]
    seen = []
    output = "\n" + "a line the agent read\n" * 40  # what the summary replaces
    for turn in range(8):
        seen += take_turn(
            client, history, f"Step {turn}: fix src/m{turn}.py TOOL", tool_output=output
        )

    assert provider.summaries >= 1
    sent = provider.chat_requests()[-1]["messages"]
    assert summary_positions(sent) == [1]
    users = [m for m in history if m["role"] == "user"]
    # Every user message, the old ones included, exactly as the client sent it and in order.
    assert [m for m in sent if m["role"] == "user"] == users
    assert sent[2 : 2 + len(users) - 1] == users[:-1]  # the pinned ones sit right after it
    assert sent[-4:] == history[-5:-1]  # the kept interaction: task, call, its two results
    assert len(sent) < len(history)  # the old rounds are summarized away
    # The summary read the rounds, never a pinned message.
    for request in provider.summary_requests():
        transcript = request["messages"][1]["content"]
        assert "a line the agent read" in transcript
        assert "Step " not in transcript
    # The next turn applies the same checkpoint with the same prefix (the cache stays warm).
    before = provider.chat_requests()[-1]["messages"]
    seen += take_turn(client, history, "Step 8: and the tests?")
    after = provider.chat_requests()[-1]["messages"]
    assert seen[-1]["x-compaction-checkpoint"] == seen[-2]["x-compaction-checkpoint"] != ""
    assert after[: len(before)] == before


def test_a_pinned_tool_result_is_never_stubbed(mock, start_proxy) -> None:
    provider = Provider(mock)
    policy = {
        "strategy": "summarize",
        "trigger": {"context_fraction": 0, "interactions": 100},  # no summary in this test
        "keep": {"interactions": 1},
        "clear_tool_results": {"older_than_interactions": 1},
        "pin": ['tool == "read_file" and contains("#keep")'],
    }
    client = openai_client(start_proxy(summarizing(mock.url, policy=policy)), "tools")
    history = [SYSTEM]
    big = "\n" + "line of a long file, read by the agent\n" * 60
    take_turn(client, history, "Read the spec TOOL", tool_output=big + "#keep")
    take_turn(client, history, "Read the code TOOL", tool_output=big)
    for turn in range(3):
        take_turn(client, history, f"Question {turn}: and then?")

    sent = provider.chat_requests()[-1]["messages"]
    results = [m["content"] for m in sent if m["role"] == "tool"]
    assert len(results) == 4
    pinned = [m for m in history if m["role"] == "tool" and "#keep" in m["content"]]
    assert results[:2] == [m["content"] for m in pinned]  # verbatim
    assert all(r.startswith("[tool result cleared") for r in results[2:])  # not pinned: stubbed
    assert provider.summaries == 0


def test_pins_that_alone_exceed_the_window_get_the_providers_overflow(mock, start_proxy) -> None:
    provider = Provider(mock)
    provider.window_tokens = 700
    policy = {
        "strategy": "summarize",
        "mode": "inline",
        "trigger": {"context_fraction": 0.6},
        "keep": {"interactions": 1},
        "pin": ['role == "user"'],
    }
    models = {"gpt-4o": {"context_window": 700}}
    server = start_proxy(summarizing(mock.url, policy=policy, models=models))
    client = openai_client(server, "overflow")
    history = [SYSTEM]
    long_task = "Be thorough and careful with every file. " * 20  # ~180 tokens, pinned
    with pytest.raises(openai.BadRequestError) as refused:
        for turn in range(6):
            take_turn(client, history, f"Step {turn}: {long_task}")
    error = refused.value.body
    assert isinstance(error, dict) and error.get("code") == "context_length_exceeded"
    assert "maximum context length is 700 tokens" in str(error.get("message"))
    assert provider.summaries >= 1  # the rest was summarized, and still the pins do not fit
    # What the provider refused still held every pinned message: nothing was dropped to fit.
    refused_prompt = provider.chat_requests()[-1]["messages"]
    users = [m for m in history if m["role"] == "user"]
    assert [m for m in refused_prompt if m["role"] == "user"] == users
    assert provider.prompt_tokens[-1] > 700


def test_anthropic_messages_keep_a_pinned_turn_verbatim(mock, second_mock, start_proxy) -> None:
    Provider(mock)  # writes the summaries
    anthropic_provider = AnthropicProvider(second_mock)
    policy = {**EVERY_THREE_INTERACTIONS, "pin": ['contains("#keep")']}
    server = start_proxy(
        summarizing(mock.url, policy=policy, upstream={"anthropic_base_url": second_mock.url})
    )
    client = anthropic_client(server, "pins-anthropic")
    history: list[dict[str, Any]] = []
    for turn in range(7):
        marker = " #keep: deploy only on Fridays" if turn == 1 else ""
        text = f"Step {turn}: fix src/m{turn}.py.{marker} " + "Go. " * 30
        history.append({"role": "user", "content": [{"type": "text", "text": text}]})
        reply = client.messages.create(
            model="claude-mock-1", max_tokens=64, system="Be careful.", messages=history
        )
        history.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in reply.content],
            }
        )

    body = anthropic_provider.requests()[-1]
    assert len(summaries_in(body)) == 1  # the summary, in system
    sent = body["messages"]
    assert len(sent) < len(history) - 1
    assert sent[0] == history[2]  # the pinned turn first, verbatim, then the kept turns
    tail = sent[1:]
    assert tail and history[len(history) - 1 - len(tail) : -1] == tail
