"""The recorded sessions of the real agents (``make e2e-agents --record``; tests/fixtures/agents/),
replayed through the proxy to the strict provider, as recorded and with ``stream`` flipped.

What must hold for every agent: no history the provider refuses, no 5xx of the proxy, no request
the proxy refuses (Claude Code's default model sends system turns inside messages), a summary in
use stays in use (tool results stubbed beside it), at most one summary per four requests.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.agents_e2e import fixtures
from tests.agents_e2e.figures import Figures
from tests.agents_e2e.replay import replay

SESSIONS = sorted(p.name.removesuffix(".json.gz") for p in fixtures.FOLDER.glob("*.json.gz"))
MODES = ["as-recorded", "stream-flipped"]


@functools.cache
def replayed(agent: str, mode: str, trigger_tokens: int = 0) -> Figures:
    """The session's figures; ``trigger_tokens``: another trigger than the recorded run's."""
    session = fixtures.load(Path(fixtures.FOLDER / f"{agent}.json.gz"))
    if trigger_tokens:
        session["trigger_tokens"] = trigger_tokens
    figures, _ = replay(session, flip_stream=mode == "stream-flipped")
    return figures


def test_sessions_are_recorded() -> None:
    assert {"claude-code", "codex", "opencode", "mini-swe-agent"} <= set(SESSIONS)
    for path in fixtures.FOLDER.glob("*.json.gz"):
        assert path.stat().st_size < 1_000_000
        session = fixtures.load(path)
        assert len(session["requests"]) >= 35, path.name


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("agent", SESSIONS)
def test_no_broken_history_and_no_5xx(agent: str, mode: str) -> None:
    figures = replayed(agent, mode)
    assert figures.requests >= 35
    assert figures.broken_histories == 0
    assert figures.proxy_5xx == 0


@pytest.mark.parametrize("agent", SESSIONS)
def test_proxy_accepts_every_request(agent: str) -> None:
    assert replayed(agent, "as-recorded").proxy_4xx == 0


@pytest.mark.parametrize("agent", SESSIONS)
def test_a_summary_in_use_stays_in_use(agent: str) -> None:
    figures = replayed(agent, "as-recorded")
    assert figures.summaries_dropped == 0
    assert figures.requests_with_summary > 0 or figures.summaries_made == 0


@pytest.mark.parametrize("agent", SESSIONS)
def test_at_most_one_summary_per_four_requests(agent: str) -> None:
    figures = replayed(agent, "as-recorded")
    assert figures.summaries_made * 4 <= figures.requests


def test_a_trigger_the_fixed_prompt_fills_is_said_in_every_compacted_answer() -> None:
    """Claude Code's fixed prompt is ~27k tokens: at a 36k trigger the next summary starts
    (soft_fraction) below the fixed prompt itself, so no cut can buy room and summaries come
    every few requests. The proxy cannot fix the user's numbers; it says so on each compacted
    answer (X-Compaction-Warning: headroom) and still never drops a summary in use."""
    session = fixtures.load(Path(fixtures.FOLDER / "claude-code-sonnet.json.gz"))
    session["trigger_tokens"] = 36000
    figures, records = replay(session)
    assert figures.broken_histories == 0
    assert figures.summaries_dropped == 0
    applied = [r for r in records if r.answer.get("x-compaction") == "applied"]
    assert applied
    assert all(r.answer.get("x-compaction-warning", "").startswith("headroom") for r in applied)
