"""Each compaction buys headroom: an agent whose fixed prompt (system and tools) is
large must not get a summary on every turn. Claude Code's is about 26k tokens; with a 45k trigger
and ``keep.tokens`` 12k, the compacted prompt (37-39k) stayed above where the next summary starts
(``soft_fraction`` 0.8 of the trigger, 36k), so the proxy asked for a summary nearly every turn.

The kept part is sized so that the compacted prompt lands well below the next summary's start
(never less than the newest tool round); when the configured numbers cannot give that, the log
says so once, the answer carries a warning and /metrics counts it.
"""

from __future__ import annotations

import logging

import httpx
import pytest

from proxy.core.tokens import TokenCounter
from tests.support.agent_history import LARGE_PROMPT_AGENT as AGENT_POLICY
from tests.support.agent_history import agent_history, fixed_prompt
from tests.support.agent_replay import replay

FIXED_TOKENS = 26_000
# A summary as long as a real one (about 1.5k tokens).
LONG_SUMMARY = " Files read: proxy/core/planner.py, proxy/core/clearing.py." * 120


@pytest.mark.parametrize("route", ["chat", "responses", "anthropic"])
def test_a_large_fixed_prompt_gets_at_most_one_summary_per_four_requests(
    mock, start_proxy, tiktoken_files, route: str
) -> None:
    system = fixed_prompt(FIXED_TOKENS, TokenCounter())
    history = agent_history(60, system=system)
    run = replay(mock, start_proxy, route, AGENT_POLICY, history, summary_padding=LONG_SUMMARY)

    first = ["summary" in held for held in run.holds].index(True)
    assert all("summary" in held for held in run.holds[first:])
    later = len(run.seen) - first  # the requests from the first compacted one on
    assert run.summaries * 4 <= later, f"{run.summaries} summaries in {later} requests"
    # Each new summary lands the prompt below where the next one starts (36k; the first one,
    # made ahead, waits for the trigger while the session grows: it lands closest).
    starts = 0.8 * AGENT_POLICY["trigger"]["input_tokens"]
    checkpoints = [h["x-compaction-checkpoint"] for h in run.seen]
    for n in range(first, len(run.seen)):
        if checkpoints[n] != checkpoints[n - 1]:
            assert int(run.seen[n]["x-compaction-tokens-after"]) < starts
    # These numbers can do it (the mock's model is unpriced: that warning may be there).
    assert not any("headroom" in h.get("x-compaction-warning", "") for h in run.seen)


def test_numbers_that_cannot_leave_room_say_so_in_the_answer_the_log_and_the_metrics(
    mock, start_proxy, tiktoken_files, caplog
) -> None:
    """A 34k-token fixed prompt under a 45k trigger: the next summary starts at 36k, so no cut
    can leave room to grow. The newest round is still kept, the answer warns, the log says it
    once, /metrics counts it."""
    system = fixed_prompt(34_000, TokenCounter())
    history = agent_history(12, system=system)
    with caplog.at_level(logging.WARNING, logger="proxy.compaction"):
        run = replay(mock, start_proxy, "chat", AGENT_POLICY, history)

    warned = [h for h in run.seen if "x-compaction-warning" in h]
    assert warned and run.summaries >= 1
    value = warned[0]["x-compaction-warning"]
    assert value.startswith("headroom; fixed_tokens=") and "next_summary_at=36000" in value
    told = [r for r in caplog.records if "no room to grow" in r.getMessage()]
    assert len(told) == 1 and "'default'" in told[0].getMessage()
    metrics = httpx.get(f"{run.url}/metrics").text
    counted = 'proxy_compaction_headroom_short_total{strategy="summarize"} '
    assert f"{counted}{float(len(warned))}" in metrics
    # The newest round is always kept verbatim, whatever the numbers.
    assert all(h["x-compaction"] in ("applied", "skipped") for h in run.seen), [
        h["x-compaction"] for h in run.seen
    ]
