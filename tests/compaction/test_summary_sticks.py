"""Once a summary is in use, every later request of the conversation applies it or a newer one.
With ``summarize`` plus ``clear_tool_results`` (config/examples/coding-agent.yaml), a
new summary used to go out on about two requests; then the answers still said ``applied``, but
the provider got the whole history with stubs and no ``<agent_summary>``, a new summary was paid
for, and the cycle repeated.

An append-only 40-round session over this repository's files (tests/support/agent_history.py)
is replayed request by request through a real proxy with the recipe's policy at a low trigger,
with each API's official client (tests/support/agent_replay.py); what is counted is what the
provider received.
"""

from __future__ import annotations

import pytest

from tests.support.agent_history import CODING_AGENT as RECIPE
from tests.support.agent_history import agent_history
from tests.support.agent_replay import replay

# A summary as long as a real one (about 1.5k tokens): longer than the stubs of the turns it
# covers once their results are cleared.
LONG_SUMMARY = " Files read: proxy/core/planner.py, proxy/core/clearing.py." * 120


@pytest.mark.parametrize(
    ("route", "padding"),
    [("chat", ""), ("responses", ""), ("anthropic", ""), ("chat", LONG_SUMMARY)],
    ids=["chat", "responses", "anthropic", "chat-long-summary"],
)
def test_a_summary_in_use_is_applied_to_every_later_request(
    mock, start_proxy, tiktoken_files, route: str, padding: str
) -> None:
    run = replay(mock, start_proxy, route, RECIPE, agent_history(40), summary_padding=padding)
    seen, holds = run.seen, run.holds
    with_summary = ["summary" in held for held in holds]

    first = with_summary.index(True)  # the session outgrows the trigger: a summary is used
    dropped = [n for n, held in enumerate(with_summary) if n > first and not held]
    assert dropped == [], f"requests after the first summary without one: {dropped}"
    for n in range(first, len(seen)):
        assert seen[n]["x-compaction"] == "applied"
        assert seen[n]["x-compaction-checkpoint"], n
    # Each summary made is used: none paid for and thrown away.
    assert run.summaries == len({h["x-compaction-checkpoint"] for h in seen[first:]})
    # The answer says what the provider's prompt held, without reading bodies.
    said = [set(filter(None, h.get("x-compaction-applied", "").split("+"))) for h in seen]
    assert said == holds
    # The recipe's both, at once. Stubs are batched on what is sent after the summary in use:
    # behind a long summary the cut moves deeper (headroom) and the part kept never holds a
    # batch's worth (8k tokens) of old results, so there the summary alone is sent.
    assert ({"summary", "stubs"} in holds) == (not padding)
