"""Ahead mode without waste: past ``soft_fraction`` a background summary starts only
when the conversation's measured growth reaches the trigger within ``ahead_turns`` turns; a
summary made and superseded before any request applied it is counted on /metrics.

The official openai client, a real proxy, the scripted mock provider (which also writes the
summaries)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.clients import admin_get, openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider, check_sent
from tests.support.settle import settle

TRIGGER = 4000  # input tokens
# Near from half the trigger on, so a slow conversation spends many turns between soft and hard.
PACED: dict[str, Any] = {
    "strategy": "summarize",
    "soft_fraction": 0.5,
    "ahead_turns": 2,
    "trigger": {"input_tokens": TRIGGER, "context_fraction": 0},
    "keep": {"interactions": 2},
}


def _filler(turn: int, words: int) -> str:
    return f"Step {turn}: " + " ".join(f"note{turn}x{k % 7}" for k in range(words))


class Run:
    """One conversation through the proxy, a turn at a time, waiting for its background work."""

    def __init__(self, server, provider: Provider) -> None:
        self.server = server
        self.provider = provider
        self.client = openai_client(server)
        self.history: list[dict[str, Any]] = [SYSTEM]
        self.turns: list[dict[str, Any]] = []  # per turn: headers, summaries made after it
        self.answered = 0

    def turn(self, text: str) -> dict[str, Any]:
        self.history.append({"role": "user", "content": text})
        raw = self.client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=self.history
        )
        self.history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        self.answered += 1
        settle(self.server.url, route="chat", answered=self.answered)
        check_sent(self.provider.chat_requests()[-1]["messages"], self.history[:-1])
        seen = {
            "outcome": raw.headers["x-compaction"],
            "before": int(raw.headers["x-compaction-tokens-before"]),
            "summaries": self.provider.summaries,
        }
        self.turns.append(seen)
        return seen

    def near_and_first_summary(self) -> tuple[int, int]:
        """The first turn past soft_fraction, and the turn after which the first summary was
        made."""
        near = next(i for i, t in enumerate(self.turns) if t["before"] > TRIGGER * 0.5)
        first = next(i for i, t in enumerate(self.turns) if t["summaries"] > 0)
        return near, first


def _unused(server) -> float:
    metrics = httpx.get(f"{server.url}/metrics").text
    found = re.search(r'^proxy_summaries_unused_total\{policy="default"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def _grow_until_applied(run: Run, words: int, limit: int = 80) -> None:
    for turn in range(limit):
        if run.turn(_filler(turn, words))["outcome"] == "applied":
            return
    raise AssertionError("the trigger never fired")


@pytest.fixture
def run(mock, provider: Provider, start_proxy) -> Run:
    """A conversation through a proxy with the PACED policy in ahead mode."""
    return Run(start_proxy(summarizing(mock.url, policy=PACED, mode="ahead")), provider)


def _until_made_ahead(run: Run) -> None:
    """Fast turns until a summary is made ahead, before the trigger fires."""
    for turn in range(40):
        if run.turn(_filler(turn, 300))["summaries"]:
            break
    assert run.turns[-1]["outcome"] == "skipped" and run.provider.summaries == 1
    assert _unused(run.server) == 0


def test_slow_growth_waits_until_the_trigger_is_two_turns_away(
    run: Run, provider: Provider
) -> None:
    _grow_until_applied(run, words=30)
    turns = run.turns
    near, first = run.near_and_first_summary()
    growth = (turns[-1]["before"] - turns[0]["before"]) / (len(turns) - 1)
    # Many turns were near before it started: before this change it started at `near`.
    assert first - near >= 5, (near, first)
    # It started when the trigger was at most two turns (and a little rounding) away ...
    assert TRIGGER - turns[first]["before"] <= 2.5 * growth
    # ... and only one summary was made: the one applied when the trigger fired.
    assert turns[-1]["summaries"] == 1
    assert turns[-1]["before"] > TRIGGER
    assert all(t["outcome"] == "skipped" for t in turns[:-1])
    assert provider.chat_requests()[-1]["messages"][1]["content"].startswith("<agent_summary>")
    assert _unused(run.server) == 0


# Fast means the trigger is within ahead_turns of the first near turn: that holds for this
# filler in tiktoken's counts, not in the approximate ones (4 bytes a token count it slower).
@pytest.mark.usefixtures("tiktoken_files")
def test_fast_growth_summarizes_as_soon_as_near_as_before(run: Run) -> None:
    _grow_until_applied(run, words=300)
    turns = run.turns
    near, first = run.near_and_first_summary()
    assert first == near  # the first near turn: within two turns of the trigger
    assert turns[-1]["outcome"] == "applied" and turns[-1]["before"] > TRIGGER


def test_a_summary_superseded_before_it_was_applied_is_counted_unused(
    run: Run, provider: Provider
) -> None:
    _until_made_ahead(run)
    # The client edits its first message: the stored summary no longer matches this history,
    # the next one starts afresh (it does not extend the first), which is never applied.
    run.history[1] = {"role": "user", "content": _filler(99, 300)}
    run.turn(_filler(100, 300))
    assert provider.summaries == 2
    assert _unused(run.server) == 1


def test_a_conversation_deleted_with_an_unapplied_summary_counts_it_unused(run: Run) -> None:
    _until_made_ahead(run)
    deleted = admin_get(run.server, "/conversations/conv-1", method="DELETE").json()
    assert deleted == {"deleted": True}
    assert _unused(run.server) == 1
    # Deleting what is no longer there counts nothing more.
    admin_get(run.server, "/conversations/conv-1", method="DELETE")
    assert _unused(run.server) == 1


# A count of interactions: one more each turn, so how far the trigger is is known exactly.
COUNTED: dict[str, Any] = {
    "strategy": "summarize",
    "soft_fraction": 0.5,
    "ahead_turns": 2,
    "trigger": {"interactions": 12, "context_fraction": 0},
    "keep": {"interactions": 2},
}


def test_an_interaction_count_waits_until_the_trigger_is_two_turns_away(
    mock, provider: Provider, start_proxy
) -> None:
    """long-chat.yaml's kind of trigger: near from the 7th interaction on, it fires past the
    12th. A summary started at the 7th covers 5 interactions (the rest is kept) and is unused if
    the chat ends before the 13th; started two turns before it fires it covers 9, and only a
    chat that came that far pays for it."""
    run = Run(start_proxy(summarizing(mock.url, policy=COUNTED, mode="ahead")), provider)
    _grow_until_applied(run, words=30, limit=16)
    first = next(i for i, t in enumerate(run.turns) if t["summaries"] > 0)
    # Turn i sends i + 1 interactions: near from turn 6, fired at turn 12.
    assert 9 <= first <= 10, [t["summaries"] for t in run.turns]
    assert len(run.turns) == 13 and provider.summaries == 1
    assert _unused(run.server) == 0
