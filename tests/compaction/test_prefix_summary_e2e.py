"""Summaries asked on the cached prefix ("Make the summarizer cacheable"): the official
openai client, a real proxy and the scripted provider, asserting what the provider received.

What a user notices on the bill: the summary made after an answer is asked of the conversation's
own model on exactly the prompt that model has just read (so the provider serves it from its
cache), with the summary instructions after it, and the summary then applied is that answer; when
that call fails, the quoted summarizer is asked instead and the conversation is still compacted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.compaction.summaries.prefix_summary import INSTRUCTION
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.mock_upstream import MockUpstream, Reply, completion, json_reply
from tests.support.provider import SYSTEM, Provider, take_turn
from tests.support.settle import settle

# Ahead of time from the third interaction (near at half of four), applied once four came.
AHEAD_ON_PREFIX: dict[str, Any] = {
    "strategy": "summarize",
    "mode": "ahead",
    "soft_fraction": 0.5,
    "ahead_turns": 0,
    "trigger": {"interactions": 4, "context_fraction": 0, "pays": False},
    "keep": {"interactions": 1},
    "summarizer": {"cached_prefix": "on", "max_summary_tokens": 300},
}


class PrefixProvider(Provider):
    """The scripted provider, answering a summary asked on the prefix with its own text (or an
    error, while ``fail_prefix``)."""

    fail_prefix = False

    def chat(self, body: dict[str, Any]) -> Reply:
        if asks_for_summary(body):
            if self.fail_prefix:
                return json_reply({"error": {"message": "down", "type": "server_error"}}, 500)
            return json_reply(completion("PREFIX-SUMMARY: the user asked for steps 0 to 2."))
        return super().chat(body)


def asks_for_summary(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and str(last.get("content", "")).startswith(INSTRUCTION)


@pytest.fixture
def prefix_provider(mock: MockUpstream) -> PrefixProvider:
    return PrefixProvider(mock)


def run(server: Any, turns: int) -> list[str]:
    """``turns`` user turns, the proxy settled after each; the X-Compaction outcome of each."""
    client = openai_client(server)
    history: list[dict[str, Any]] = [SYSTEM]
    outcomes = []
    for turn in range(turns):
        text = f"Step {turn}: fix src/m{turn}.py. " + "Be thorough. " * 12  # worth a summary
        headers = take_turn(client, history, text)
        outcomes += [h["x-compaction"] for h in headers]
        settle(server.url, route="chat", answered=len(outcomes))
    return outcomes


def test_the_summary_is_asked_on_the_prompt_the_provider_just_read(
    mock: MockUpstream, prefix_provider: PrefixProvider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=AHEAD_ON_PREFIX, mode="ahead"))
    outcomes = run(server, 6)
    received = [r.json() for r in mock.chat_requests()]
    asked = [i for i, body in enumerate(received) if asks_for_summary(body)]

    assert asked, "no summary was asked on the prefix"
    first = asked[0]
    call, before = received[first], received[first - 1]
    # The conversation's request it follows, byte for byte where the cache looks...
    assert json.dumps(call["messages"][:-1]) == json.dumps(before["messages"])
    assert call["tools"] == before["tools"] and call["model"] == before["model"]
    # ...with only what cannot go on changed.
    assert call["tool_choice"] == "none" and "stream" not in call
    assert call["max_completion_tokens"] == 300
    assert prefix_provider.summary_requests() == []  # the quoted summarizer was not asked
    # The summary applied is that answer.
    assert "applied" in outcomes
    applied = [b for b in received if not asks_for_summary(b) and "PREFIX-SUMMARY" in str(b)]
    assert applied and applied[-1]["messages"][1]["content"].startswith("<agent_summary>")


def test_a_failed_call_on_the_prefix_falls_back_to_the_quoted_summarizer(
    mock: MockUpstream, prefix_provider: PrefixProvider, start_proxy
) -> None:
    prefix_provider.fail_prefix = True
    server = start_proxy(summarizing(mock.url, policy=AHEAD_ON_PREFIX, mode="ahead"))
    outcomes = run(server, 6)

    assert any(asks_for_summary(r.json()) for r in mock.chat_requests())
    assert len(prefix_provider.summary_requests()) >= 1  # quoted instead
    assert "applied" in outcomes
    sent = prefix_provider.chat_requests()[-1]["messages"]
    assert "SUMMARY-1" in sent[1]["content"]


def test_off_keeps_the_quoted_summarizer(
    mock: MockUpstream, prefix_provider: PrefixProvider, start_proxy
) -> None:
    policy = {**AHEAD_ON_PREFIX, "summarizer": {"cached_prefix": "off"}}
    server = start_proxy(summarizing(mock.url, policy=policy, mode="ahead"))
    run(server, 6)
    assert not any(asks_for_summary(r.json()) for r in mock.chat_requests())
    assert len(prefix_provider.summary_requests()) >= 1
