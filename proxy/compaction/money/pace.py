"""A conversation's pace: how fast its history grows a turn, and the summaries made for it that
no request has applied yet ("Ahead mode without waste"; docs/policies.md).

Ahead mode used to start a background summary as soon as a trigger was near (``soft_fraction``)
and apply it when the trigger fired, so a conversation that ended in between paid for a summary
it never used. Now, past ``soft_fraction``, the summary starts only when the conversation's own
measured growth reaches the trigger within ``ahead_turns`` turns (``due``); while the growth is
unknown (fewer than ``MIN_SAMPLES`` growing requests seen) it starts as before.

The record (``proxy.compaction.money.books``' ``Pace``) is small and lives in the conversation's
ledger entry (``proxy.state.ledgers``, under ``"pace"``: one sealed value, the store's TTL,
compare-and-set), so every replica sees it:

- each planned request is a sample, written with its answer in the entry's one write after it
  (``proxy.compaction.money.spending``): its time (the price trigger's warm-cache test,
  ``proxy.compaction.money.paying``), the full history's tokens (the plan's ``tokens_before``)
  and the running mean of what each growing request added (a retry, an edit or a fork that does
  not grow the history is no sample); a request that applied the unapplied summary clears it;
- ``stored`` after each new summary: if the summary no request has applied yet is not the one
  the new summary extends, it is superseded, never to be applied: ``SummaryUnused`` tells the
  metrics how many summaries its chain holds;
- ``forgetting`` when the admin API deletes the conversation: its unapplied summaries, told
  alike. (A record that expires goes without a word: not counted.)

Everything fails open: an unreadable or missing record is an unknown growth (as before), a
failed write loses a sample, never a request.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import SummaryUnused
from proxy.compaction.money.books import MIN_SAMPLES, PACE_KEY, Pace, Stored
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan import Plan
from proxy.economics.decision import turns_to_reach
from proxy.errors import StoreError
from proxy.events import Listeners
from proxy.state.ledgers import Ledgers

# The record is books' (pure); named here too, where the rewriter reads it.
__all__ = ["MIN_SAMPLES", "PACE_KEY", "Pace", "Paces", "due", "turns_left", "turns_to_trigger"]

logger = logging.getLogger("proxy.compaction")

# Triggers measured on the prompt's tokens: the only ones a growth in tokens predicts.
_PROMPT_TRIGGERS = frozenset({"input_tokens", "context_fraction"})
# ...and those whose distance in turns is known: the interaction count (one a turn at most).
_PREDICTED = _PROMPT_TRIGGERS | {"interactions"}


def token_limits(conv: Conversation, names: Iterable[str]) -> list[int]:
    """The token counts at which the named token triggers fire (those set, with a window)."""
    trigger = conv.policy.trigger
    window = conv.model_info.context_window if conv.model_info else None
    limits = []
    if "input_tokens" in names and trigger.input_tokens > 0:
        limits.append(trigger.input_tokens)
    if "context_fraction" in names and window and trigger.context_fraction > 0:
        limits.append(int(trigger.context_fraction * window))
    return limits


def turns_to_trigger(conv: Conversation, current: Plan, growth: float) -> float:
    """Turns until a token trigger fires on ``current`` growing ``growth`` tokens a turn, near
    or not: the compaction that comes regardless of price (infinity when none is set)."""
    limits = token_limits(conv, _PROMPT_TRIGGERS)
    return turns_to_reach(current.tokens_after, min(limits), growth) if limits else math.inf


def turns_left(conv: Conversation, current: Plan, growth: float) -> float:
    """Turns until the nearest near trigger fires at ``growth`` tokens a turn, or, for the
    ``interactions`` count, at one interaction a turn (at most: a floor); 0 when a near trigger
    is neither (another count or a tool trigger: not predicted, due as before)."""
    if not current.near or not set(current.near) <= _PREDICTED:
        return 0.0
    limits = token_limits(conv, current.near)
    turns = []
    if limits:
        turns.append(turns_to_reach(current.tokens_after, min(limits), growth))
    if "interactions" in current.near and current.interactions_left is not None:
        turns.append(float(current.interactions_left))
    return min(turns, default=0.0)


def due(conv: Conversation, current: Plan, pace: Pace | None) -> bool:
    """Whether the summary a near trigger asks for should be made ahead now."""
    if current.fired:
        return True
    growth = None if pace is None else pace.grown_to(current.tokens_before).growth_per_turn
    if growth is None or conv.policy.ahead_turns <= 0:
        return True  # growth unknown: as before, ahead as soon as near
    return turns_left(conv, current, growth) <= conv.policy.ahead_turns


class Paces:
    """Reads each conversation's pace record and moves its unapplied summary (fail open). A
    request's own sample is written with its answer (``proxy.compaction.money.spending``)."""

    def __init__(
        self, ledgers: Ledgers, listeners: Listeners, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._ledgers = ledgers
        self._listeners = listeners
        self.clock = clock

    async def read(self, conv: Conversation) -> Pace | None:
        """The conversation's record; None when the store did not answer."""
        try:
            entry = await self._ledgers.inspect(conv.tenant, conv.conversation_id)
        except StoreError:
            return None
        return Pace.from_entry(entry)

    async def stored(self, conv: Conversation, checkpoint: Checkpoint) -> None:
        """Record a new summary; tell when it supersedes one never applied. Awaited where the
        summary is stored (one store write beside a summarizer call), so the record is current
        before anything else happens to the conversation."""
        edit = Stored(checkpoint.id, checkpoint.parent_id, conv.policy_name)
        try:
            await self._ledgers.update(conv.tenant, conv.conversation_id, edit)
        except Exception:  # fail open: the pace steers ahead-of-time work, never a request
            logger.exception("pace update failed")
            return
        if edit.superseded > 0:
            self._listeners.emit(SummaryUnused(conv.policy_name, edit.superseded))

    async def forgetting(
        self, tenant: str, conversation_id: str, forget: Callable[[], Awaitable[bool]]
    ) -> bool:
        """Run ``forget`` (the store's delete: StoreError passes) and tell the summaries it
        took away unapplied; its answer."""
        try:
            entry = await self._ledgers.inspect(tenant, conversation_id)
        except StoreError:
            entry = None
        deleted = await forget()
        pace = Pace.from_entry(entry)
        if deleted and pace.unapplied is not None and pace.unapplied_count > 0:
            self._listeners.emit(SummaryUnused(pace.policy, pace.unapplied_count))
        return deleted
