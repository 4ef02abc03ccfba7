"""Deciding by price: does compacting now pay for itself over the turns still to come?

Providers bill a repeated prompt prefix at a tenth to a half of the input price, so a shorter
prompt saves little per turn, while a compaction moves the prefix and costs at once. The rule,
in dollars (``decide``):

- The one-time cost of compacting now: the summarizer call, plus this turn's difference
  between sending the compacted prompt (a new prefix: ``C`` tokens written at the cache-write
  price, which is the input price under OpenAI's rule, except the start a warm cache still
  holds, ``kept_prefix_tokens``: the tools and system prompt, read at the cached price unless
  the compaction moves them, ``proxy.compaction.money.paying.prefix_break``) and sending the prompt
  uncompacted (``P`` tokens: with a warm cache the previous prompt read at the cached price and
  this turn's growth written; with a cold cache, all of it written). With a cold cache this
  difference is a saving that can pay for the summary at once: the idle moment is the cheap one.
- The saving of every later turn: both prompts grow by the same turns, so they differ by
  ``P - C`` tokens, read from a warm cache at the cached price.
- Compacting pays when the cost is repaid within the expected remaining turns; the break-even
  is ``cost / saving per turn`` turns (0 when compacting is cheaper at once). A window that the
  uncompacted prompt no longer fits overrides price: the request must be compacted.
- And when compacting now costs less than compacting later. A conversation is compacted again
  and again as it grows back from its summary: with ``K`` the cost of a compaction, ``g`` the
  growth per turn and ``c`` the cached price, compacting every ``T`` turns costs
  ``K / T + g c T / 2`` a turn, least at ``T* = sqrt(2K / (g c))``. The excess ``E = P - C``
  took ``E / g`` turns to grow, so now is the moment once ``E / g >= T*``, which is: the
  break-even ``K / (E c)`` is within ``E / (2g)`` turns. Without it a conversation that goes on
  compacts every few turns, each time writing the new prefix for a small saving. The first
  compaction weighs it too: it has the same choice (a small cut now, its whole new prefix
  written for a saving of a few tokens a turn, or a larger one later), and a break-even within
  the turns the conversation has had is as likely as not to fall after it ends (a public
  opencode session compacted at turn 53 to repay in 23 turns, and ended 11 turns later). Only a
  summary made ahead of time is not held back: it is paid for (waiting would leave it unused).
- Unless a token trigger comes first. Waiting assumes the conversation goes on growing towards
  the larger cut; a token trigger ``F`` turns away (``F <= E / (2g)``) compacts regardless of
  price, so the choice is now or at the trigger. Now saves ``E c`` a turn until then and moves
  every later compaction ``F`` turns earlier, one more compaction in ``E / g + F`` turns (the
  cycle it starts: the compacted prompt grows back to the trigger): now pays when the
  break-even is within ``E / g + F``. (Held back at turn 28 of a 38-turn agent run whose window
  trigger was 7 turns away, the cut came at the trigger, its summary made ahead and used for
  the last turns: more than sending direct.)

Kept simple on purpose: later turns are priced as if the cache stays warm (a pause past the TTL
would make each saving larger, so the rule errs towards not compacting), the comparison is
now against a later compaction at a steady growth (or against never, over the remaining
turns), and all tokens are the provider's. An unpriced
model (``Price.priced`` false) is not decided by price: the caller keeps its token thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from proxy.economics.prices import PER_MILLION, Price

__all__ = ["Outlook", "PriceDecision", "decide", "turns_to_reach"]

Reason = Literal["window", "unpriced", "pays", "does-not-pay", "no-saving"]


@dataclass(frozen=True, slots=True)
class Outlook:
    """What the decision weighs, in the provider's tokens."""

    prompt_tokens: int  # the prompt sent uncompacted this turn
    compacted_tokens: int  # the prompt sent if compacted this turn
    summary_input_tokens: int  # the summarizer's prompt, billed uncached
    summary_output_tokens: int  # the summary it is expected to write
    growth_per_turn: float  # the conversation's measured prompt growth per turn
    remaining_turns: float  # the turns expected after this one
    cache_warm: bool  # the conversation's previous request was within the cache TTL
    window_forced: bool = False  # the uncompacted prompt does not fit the model's window
    # Turns until a token trigger (input_tokens, context_fraction) fires on the uncompacted
    # prompt at this growth: a compaction that comes regardless of price (infinity: none).
    trigger_turns: float = math.inf
    summary_cached_tokens: int = 0  # of the summarizer's prompt, read from the cache
    # Of the compacted prompt, the tokens at its start the provider still holds cached (the
    # tools and system prompt a summary leaves as they are; 0 when the compaction moves them).
    kept_prefix_tokens: int = 0


@dataclass(frozen=True, slots=True)
class PriceDecision:
    """Whether to compact now, and the figures behind it (dollars)."""

    compact: bool
    reason: Reason
    cost: float = 0.0  # one-time: the summary plus this turn's difference (negative: a gain)
    saving_per_turn: float = 0.0  # each later turn's saving
    break_even_turns: float | None = None  # later turns to repay the cost; None: never


def decide(
    outlook: Outlook, price: Price, *, summarizer_price: Price | None = None
) -> PriceDecision:
    """Whether compacting now pays at ``price`` (the conversation's model) and
    ``summarizer_price`` (the summarizer's model; None: the same)."""
    if not price.priced:
        return PriceDecision(compact=outlook.window_forced, reason=_forced_or("unpriced", outlook))
    s = summarizer_price or price
    prompt, compacted = outlook.prompt_tokens, outlook.compacted_tokens
    summary = (
        outlook.summary_input_tokens * s.input
        + outlook.summary_cached_tokens * s.cached_input
        + outlook.summary_output_tokens * s.output
    )
    if outlook.cache_warm:
        growth = min(max(outlook.growth_per_turn, 0.0), float(prompt))
        keep_now = (prompt - growth) * price.cached_input + growth * price.cache_write
    else:
        keep_now = prompt * price.cache_write
    kept = min(max(outlook.kept_prefix_tokens, 0), compacted) if outlook.cache_warm else 0
    written = (compacted - kept) * price.cache_write + kept * price.cached_input
    cost = (summary + written - keep_now) / PER_MILLION
    saving = max(prompt - compacted, 0) * price.cached_input / PER_MILLION
    if cost <= 0:
        break_even: float | None = 0.0
    elif saving > 0:
        break_even = cost / saving
    else:
        break_even = None
    per_turn = max(outlook.growth_per_turn, 0.0)
    excess = max(prompt - compacted, 0)
    # Waiting costs less beyond this many turns; not for a summary made ahead of time (its cost
    # is spent: waiting would only leave it unused).
    to_make = outlook.summary_input_tokens > 0 or outlook.summary_output_tokens > 0
    later = excess / (2 * per_turn) if to_make and per_turn > 0 else math.inf
    if later < math.inf and outlook.trigger_turns <= later:
        # A token trigger compacts before the larger cut comes: the choice is now or at the
        # trigger. Now moves every later compaction that many turns earlier, so it pays when
        # repaid within the cycle it starts (until the compacted prompt reaches the trigger).
        later = excess / per_turn + max(outlook.trigger_turns, 0.0)
    within = min(max(outlook.remaining_turns, 0.0), later)
    pays = break_even is not None and break_even <= within
    if outlook.window_forced or pays:
        reason: Reason = _forced_or("pays", outlook)
    else:
        reason = "does-not-pay" if break_even is not None else "no-saving"
    return PriceDecision(
        compact=outlook.window_forced or pays,
        reason=reason,
        cost=cost,
        saving_per_turn=saving,
        break_even_turns=break_even,
    )


def _forced_or(reason: Reason, outlook: Outlook) -> Reason:
    return "window" if outlook.window_forced else reason


def turns_to_reach(tokens: int, limit: int, growth_per_turn: float) -> float:
    """Turns until a prompt of ``tokens`` growing ``growth_per_turn`` a turn reaches ``limit``:
    0 when it has, infinity when it does not grow. Ahead-of-time work starts only when this is
    a turn or two, so a conversation that ends before its trigger pays for no summary."""
    if tokens >= limit:
        return 0.0
    if growth_per_turn <= 0:
        return math.inf
    return (limit - tokens) / growth_per_turn
