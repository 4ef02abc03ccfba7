"""The recorded sessions of the real agents (``make e2e-agents --record``; tests/fixtures/agents/),
replayed through the proxy to the strict provider, as recorded and with ``stream`` flipped.

What must hold for every agent: no history the provider refuses, no 5xx of the proxy. What the
issue asks of compaction (a summary in use stays in use; at most one summary per four requests;
the proxy accepts Claude Code's default model) is checked too, and marked as expected to fail
where main does not hold it yet: other branches fix those.
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


def expected_failure(reason: str, *agents: str) -> list[object]:
    """The sessions, those in ``agents`` marked as failing today for ``reason``."""
    marked = pytest.mark.xfail(reason=reason, strict=False)
    return [pytest.param(a, marks=marked) if a in agents else a for a in SESSIONS]


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


DROPPED = "with clear_tool_results a summary is made and then dropped or never sent"


@pytest.mark.parametrize("agent", expected_failure(DROPPED, "codex", "mini-swe-agent"))
def test_a_summary_in_use_stays_in_use(agent: str) -> None:
    figures = replayed(agent, "as-recorded")
    assert figures.summaries_dropped == 0
    assert figures.requests_with_summary > 0 or figures.summaries_made == 0


PER_TURN = "a large fixed prompt leaves no headroom after a summary: one per few turns"


@pytest.mark.parametrize("agent", expected_failure(PER_TURN))
def test_at_most_one_summary_per_four_requests(agent: str) -> None:
    figures = replayed(agent, "as-recorded")
    assert figures.summaries_made * 4 <= figures.requests


@pytest.mark.xfail(reason=PER_TURN, strict=False)
def test_a_trigger_near_the_fixed_prompt_still_buys_headroom() -> None:
    """Claude Code's fixed prompt is ~27k tokens: at a 36k trigger and a 12k keep the compacted
    prompt (~32k) stays above where the next summary starts, and on main a summary is made every
    few requests (11 in 41). Each summary must buy room for at least four requests."""
    figures = replayed("claude-code-sonnet", "as-recorded", trigger_tokens=36000)
    assert figures.broken_histories == 0
    assert figures.summaries_made * 4 <= figures.requests
