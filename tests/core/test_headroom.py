"""The planner over an agent's append-only session (tests/support/agent_history.py), request by
request, the way a proxy carries its checkpoints: a summary in use stays in use while tool
results are stubbed, each compaction leaves room to grow, and the plan says what it applied."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from proxy.core.headroom import KEPT_SHARE
from proxy.core.interactions import Grouping, Summed, group
from proxy.core.plan import cut_deeper
from proxy.core.planner import Plan, PriorSummary, plan
from proxy.core.policy import PolicySettings
from proxy.core.tokens import TokenCounter
from tests.core.test_carried import _histories
from tests.support.agent_history import (
    CODING_AGENT,
    LARGE_PROMPT_AGENT,
    TOOLS,
    agent_history,
    fixed_prompt,
    requests,
)

SUMMARY = "SUMMARY: the agent read the planner and the clearing code. " * 20


def session(
    history: list[dict[str, Any]], policy: PolicySettings, counter: TokenCounter
) -> list[Plan]:
    """Each request planned with the newest summary asked for so far, made at once (as ahead
    mode makes it after the answer): a first one made before a trigger fired waits for it."""
    plans: list[Plan] = []
    prior: PriorSummary | None = None
    for n, prefix in enumerate(requests(history)):
        planned = plan(
            prefix,
            policy,
            model="gpt-4o",
            counter=counter,
            model_info=None,
            prior=prior,
            tools=TOOLS,
        )
        plans.append(planned)
        wanted = planned.summary_request
        if wanted is not None:
            active = prior is not None or bool(planned.fired)
            prior = PriorSummary(SUMMARY, wanted.covered, f"cp{n}", active=active)
    return plans


def large_prompt_session(
    fixed: int, rounds: int, counter: TokenCounter
) -> tuple[list[Plan], list[Plan]]:
    """The plans of a session whose system prompt is ``fixed`` tokens under Claude Code's
    numbers, and those that asked for a summary (at least one)."""
    history = agent_history(rounds, system=fixed_prompt(fixed, counter))
    plans = session(history, PolicySettings.model_validate(LARGE_PROMPT_AGENT), counter)
    asked = [p for p in plans if p.summary_request is not None]
    assert asked
    return plans, asked


def test_a_summary_in_use_stays_in_use_while_results_are_stubbed(counter: TokenCounter) -> None:
    plans = session(agent_history(40), PolicySettings.model_validate(CODING_AGENT), counter)
    used = [p.summary_text is not None for p in plans]
    first = used.index(True)
    assert all(used[first:]), [n for n, u in enumerate(used) if n > first and not u]
    assert any(p.cleared for p in plans[first:])  # stubs came and went meanwhile
    parts = {p.applied_parts for p in plans}
    assert ("summary", "stubs") in parts and ("summary",) in parts and () in parts


def test_each_summary_leaves_room_to_grow_under_a_large_fixed_prompt(
    counter: TokenCounter,
) -> None:
    plans, asked = large_prompt_session(26_000, 40, counter)
    for p in asked:
        assert p.headroom_short is None
        ctx = p._context
        assert ctx is not None
        fixed = ctx.counts[0] + ctx.fixed_tokens
        room = 0.8 * 45_000 - fixed - counter.count_text(SUMMARY, "gpt-4o")
        covered = p.summary_request.covered
        assert p.grouping.kept_tokens(ctx.counts, covered) <= room * KEPT_SHARE + 50
    assert len(asked) * 4 <= len(plans) - plans.index(asked[0])


def test_a_fixed_prompt_near_the_trigger_keeps_the_newest_round_and_says_so(
    counter: TokenCounter,
) -> None:
    _, asked = large_prompt_session(34_000, 12, counter)
    for p in asked:
        assert p.summary_request.covered == p.grouping.last_cut()  # the newest round stays
        fixed, starts = p.headroom_short or (0, 0)
        assert starts == 36_000 and fixed > 33_000


def test_a_lower_price_floor_keeps_as_much_of_the_newest_work(counter: TokenCounter) -> None:
    """The price trigger fired (``fire``) on one long agent run: its cut keeps the same newest
    rounds verbatim whether it looks from 20k or from 32k tokens (the floor says when compacting is
    weighed, not how much of the agent's newest work goes into the summary)."""
    history = next(
        prefix
        for prefix in requests(agent_history(80))
        if counter.count_text(str(prefix), "gpt-4o") > 40_000
    )

    def kept(floor: int) -> int:
        policy = PolicySettings.model_validate(
            {"trigger": {"context_fraction": 0, "pays": True, "pays_from_tokens": floor}}
        )
        planned = plan(
            history,
            policy,
            model="gpt-4o",
            counter=counter,
            model_info=None,
            prior=None,
            tools=TOOLS,
            fire=("pays",),
        )
        assert planned.summary_request is not None
        ctx = planned._context
        assert ctx is not None
        return planned.grouping.kept_tokens(ctx.counts, planned.summary_request.covered)

    assert kept(20_000) == kept(32_000) > 5_000


def _cut_deeper_step_by_step(grouping: Grouping, counts: list[int], cut: int, budget: int) -> int:
    """``cut_deeper`` as first written: the task's tokens and the messages passed, recounted
    at every step."""
    cuts, deepest = grouping.cuts, grouping.last_cut()
    i, tail, position, pins = 0, grouping.kept_tokens(counts, cut), cut, set(grouping.pinned)
    while i < len(cuts) and cuts[i] < cut:
        i += 1
    while position < deepest and i < len(cuts) and tail > budget:
        if cuts[i] <= position:
            i += 1
            continue
        tail += grouping.task_tokens(counts, cuts[i], pins)
        tail -= grouping.task_tokens(counts, position, pins)
        tail -= sum(counts[j] for j in range(position, cuts[i]) if j not in pins)
        position = cuts[i]
    return position


def test_a_deeper_cut_falls_where_a_step_by_step_walk_puts_it() -> None:
    """Pinned messages and the task sent again included, the walk that carries the task's
    tokens from step to step, and the one that skips what cannot fit, stop at the cut the
    first walk stopped at."""
    rng = random.Random(23)
    for step, history in enumerate(_histories(29, 300)):
        grouping = group(history)
        if rng.random() < 0.5:
            pinned = sorted(rng.sample(range(len(history)), min(3, len(history))))
            grouping = replace(grouping, pinned=tuple(pinned))
        counts = [rng.randint(1, 400) for _ in history]
        for cut in (*grouping.cuts, grouping.preamble_len):
            budget = rng.randint(0, sum(counts))
            expected = _cut_deeper_step_by_step(grouping, counts, cut, budget)
            assert cut_deeper(grouping, counts, cut, budget) == expected, step
            # With running sums, the cuts whose messages alone exceed the budget are skipped.
            assert cut_deeper(grouping, Summed(counts), cut, budget) == expected, step
