"""Headroom: each compaction must leave room to grow before the next one is due.

A summary is asked for once a token trigger is *near* (``soft_fraction`` of it: where the next
summary starts). If the compacted prompt (the preamble, the tools, the summary and the part kept
verbatim) is itself near that threshold, every later turn asks for another summary that saves
little: with an agent whose fixed prompt (system and tools) is 26k tokens, a 45k trigger and
``keep.tokens`` 12k, that was a summary nearly every turn. So the part kept verbatim is sized
here, after ``keep`` (``proxy.core.keep``) chose it:

- ``keep`` in tokens (or a fraction of the window): at most ``KEPT_SHARE`` of the room the fixed
  part and the summary leave under the near threshold stays verbatim, the rest is room to grow;
- ``keep`` in interactions or messages (no budget of its own): the cut moves deeper until the
  prompt keeps ``DEEPER_SHARE`` of the near threshold (tuned on bench_agent_run); for the price
  trigger, of ``PAYS_TAIL_OF_TOKENS`` at least, so a lower ``pays_from_tokens`` compacts sooner
  without keeping less of the newest work verbatim.

Never past the newest tool round and the task message (``plan.cut_deeper``). When even those
leave less room than they take, or the fixed part leaves less than ``MIN_ROOM_SHARE`` of the
threshold, the configured numbers cannot buy headroom: ``Headroom.short`` says so (the
answer's warning, the log, the metrics: ``proxy.compaction``).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.interactions import Grouping
from proxy.core.plan import PlanContext, cut_deeper
from proxy.core.triggers import Verdict

PAYS = "pays"  # the price trigger (proxy.compaction.money.paying), fired through ``fire``
# Share of the near threshold that a deeper cut keeps verbatim when ``keep`` counts whole turns:
# the rest is room for the summary and for the run to grow several rounds before the next
# summary is due (with an 8k window and ~1k-token tool outputs, 0.5 asked for a summary every
# 2-3 rounds, 0.3 every 4-5: bench_agent_run).
DEEPER_SHARE = 0.3
# The near threshold a price-triggered cut sizes its verbatim tail by, at least (whatever
# ``pays_from_tokens``): the prompt keeps DEEPER_SHARE of it, about 9.6k tokens with the fixed
# part, unless a token trigger's own near threshold is lower.
PAYS_TAIL_OF_TOKENS = 32_000
# Share of the room under the near threshold (what the preamble, the tools and the summary leave
# of it) that a token ``keep`` may fill verbatim; the other half is the growth before the next
# summary starts.
KEPT_SHARE = 0.5
# Below this share of the near threshold left by the fixed part, the numbers cannot buy headroom
# whatever the newest round weighs: the trigger sits on top of the agent's fixed prompt.
MIN_ROOM_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Headroom:
    cut: int  # where the verbatim part starts
    short: bool = False  # the fixed part (or the newest round) fills the room: cannot do better
    fixed_tokens: int = 0  # preamble, tools and summary: what no cut can shrink
    starts_at: int = 0  # where the next summary starts (the near threshold), 0: no token trigger


def next_start(
    ctx: PlanContext, current: Verdict, window: int | None, *, pays_at: int | None = None
) -> int:
    """Tokens at which the next summary starts: the lowest near threshold among the token
    triggers that are near now (0 when none is). ``pays_at``: the price trigger's, when not its
    floor."""
    trigger, soft = ctx.policy.trigger, ctx.policy.soft_fraction
    nears = []
    if "input_tokens" in current.near:
        nears.append(trigger.input_tokens * soft)
    if "context_fraction" in current.near and window:
        nears.append(trigger.context_fraction * window * soft)
    if PAYS in current.near and trigger.pays_from_tokens:  # the price trigger's own floor
        nears.append(pays_at or trigger.pays_from_tokens)
    return int(min(nears)) if nears else 0


def with_headroom(
    ctx: PlanContext,
    grouping: Grouping,
    cut: int,
    current: Verdict,
    window: int | None,
    *,
    summary_tokens: int,
    whole_turns: bool,
) -> Headroom:
    """``cut`` moved deeper, round by round, until the compacted prompt leaves room to grow
    before the next summary starts (see the module docstring). ``summary_tokens``: the next
    summary's expected size (about the one applied now, if any)."""
    near = next_start(ctx, current, window)
    if not near:
        return Headroom(cut)
    fixed = sum(ctx.counts[: grouping.preamble_len]) + ctx.fixed_tokens
    if whole_turns:
        if fixed + summary_tokens + grouping.kept_tokens(ctx.counts, cut) <= near:
            return Headroom(cut)
        # A price-triggered cut keeps the tail it kept when the price trigger looked only from
        # 32k: the floor says when compacting is weighed, not how much of the newest work the
        # agent loses to the summary. A token trigger nearer than that still bounds it.
        pays_at = max(ctx.policy.trigger.pays_from_tokens, PAYS_TAIL_OF_TOKENS)
        tail_of = next_start(ctx, current, window, pays_at=pays_at)
        deeper = cut_deeper(grouping, ctx.counts, cut, int(tail_of * DEEPER_SHARE) - fixed)
        return Headroom(deeper, fixed_tokens=fixed + summary_tokens, starts_at=near)
    fixed += summary_tokens
    room = near - fixed
    budget = int(room * KEPT_SHARE)
    deeper = cut_deeper(grouping, ctx.counts, cut, budget)
    short = room < near * MIN_ROOM_SHARE or grouping.kept_tokens(ctx.counts, deeper) > budget
    return Headroom(deeper, short=short, fixed_tokens=fixed, starts_at=near)
