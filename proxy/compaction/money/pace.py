"""A conversation's pace: how fast its history grows a turn, and the summaries made for it that
no request has applied yet ("Ahead mode without waste"; docs/policies.md).

Ahead mode used to start a background summary as soon as a trigger was near (``soft_fraction``)
and apply it when the trigger fired, so a conversation that ended in between paid for a summary
it never used. Now, past ``soft_fraction``, the summary starts only when the conversation's own
measured growth reaches the trigger within ``ahead_turns`` turns (``due``); while the growth is
unknown (fewer than ``MIN_SAMPLES`` growing requests seen) it starts as before.

The record is small and lives in the conversation's ledger entry (``proxy.state.ledgers``, under
``"pace"``: one sealed value, the store's TTL, compare-and-set), so every replica sees it:

- ``seen`` after each planned request: its time (the price trigger's warm-cache test,
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
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import SummaryUnused
from proxy.compaction.money.pending import PendingWrites
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan import Plan
from proxy.economics.decision import turns_to_reach
from proxy.errors import StoreError
from proxy.events import Listeners
from proxy.state.ledgers import Entry, Ledgers

logger = logging.getLogger("proxy.compaction")

PACE_KEY = "pace"  # the record's key inside the ledger entry
MIN_SAMPLES = 2  # growing requests seen before the growth is trusted
# Triggers measured on the prompt's tokens: the only ones a growth in tokens predicts.
_PROMPT_TRIGGERS = frozenset({"input_tokens", "context_fraction"})
# ...and those whose distance in turns is known: the interaction count (one a turn at most).
_PREDICTED = _PROMPT_TRIGGERS | {"interactions"}


@dataclass(frozen=True, slots=True)
class Pace:
    """The record: the history's size at the last request, its mean growth, the newest summary
    not applied yet and how many summaries its chain holds."""

    tokens: int = 0
    samples: int = 0
    growth: float = 0.0
    unapplied: str | None = None
    unapplied_count: int = 0
    policy: str = ""  # the policy of the last request seen: what the metrics label
    at: float | None = None  # when the last request was seen (the clock's seconds)

    @classmethod
    def from_entry(cls, entry: Entry | None) -> Pace:
        raw = entry.get(PACE_KEY) if entry else None
        if not isinstance(raw, dict):
            return cls()
        try:
            unapplied = raw.get("unapplied")
            policy = raw.get("policy")
            at = raw.get("at")
            return cls(
                tokens=int(raw.get("tokens", 0)),
                samples=int(raw.get("samples", 0)),
                growth=float(raw.get("growth", 0.0)),
                unapplied=unapplied if isinstance(unapplied, str) else None,
                unapplied_count=int(raw.get("unapplied_count", 0)),
                policy=policy if isinstance(policy, str) else "",
                at=float(at) if isinstance(at, int | float) else None,
            )
        except (TypeError, ValueError):
            return cls()

    def grown_to(self, tokens: int) -> Pace:
        """The record once a request with a history of ``tokens`` is seen."""
        if self.tokens <= 0 or tokens <= self.tokens:  # first seen, or a retry, edit, fork
            return replace(self, tokens=tokens)
        samples = self.samples + 1
        growth = self.growth + (tokens - self.tokens - self.growth) / samples
        return replace(self, tokens=tokens, samples=samples, growth=growth)

    @property
    def growth_per_turn(self) -> float | None:
        """Mean tokens a turn adds; None while too few turns were seen."""
        return self.growth if self.samples >= MIN_SAMPLES else None


def turns_left(conv: Conversation, current: Plan, growth: float) -> float:
    """Turns until the nearest near trigger fires at ``growth`` tokens a turn, or, for the
    ``interactions`` count, at one interaction a turn (at most: a floor); 0 when a near trigger
    is neither (another count or a tool trigger: not predicted, due as before)."""
    if not current.near or not set(current.near) <= _PREDICTED:
        return 0.0
    trigger = conv.policy.trigger
    window = conv.model_info.context_window if conv.model_info else None
    limits = []
    if "input_tokens" in current.near:
        limits.append(trigger.input_tokens)
    if "context_fraction" in current.near and window:
        limits.append(int(trigger.context_fraction * window))
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
    """Reads and updates each conversation's pace record (fail open)."""

    def __init__(
        self, ledgers: Ledgers, listeners: Listeners, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._ledgers = ledgers
        self._listeners = listeners
        self.clock = clock
        self._writes = PendingWrites("pace write")

    async def read(self, conv: Conversation) -> Pace | None:
        """The conversation's record; None when the store did not answer."""
        try:
            entry = await self._ledgers.inspect(conv.tenant, conv.conversation_id)
        except StoreError:
            return None
        return Pace.from_entry(entry)

    def seen(self, conv: Conversation, current: Plan) -> None:
        """Record one planned request (must not block)."""
        applied = current.applied_checkpoint if current.changed else None
        now = self.clock()

        def change(pace: Pace) -> Pace:
            pace = replace(pace.grown_to(current.tokens_before), policy=conv.policy_name, at=now)
            if applied is not None and applied == pace.unapplied:
                pace = replace(pace, unapplied=None, unapplied_count=0)
            return pace

        self._writes.start(lambda: self._write(conv, change))

    async def stored(self, conv: Conversation, checkpoint: Checkpoint) -> None:
        """Record a new summary; tell when it supersedes one never applied. Awaited where the
        summary is stored (one store write beside a summarizer call), so the record is current
        before anything else happens to the conversation."""
        superseded: list[int] = []

        def change(pace: Pace) -> Pace:
            extends = pace.unapplied is not None and checkpoint.parent_id == pace.unapplied
            superseded[:] = [pace.unapplied_count] if pace.unapplied and not extends else []
            count = pace.unapplied_count + 1 if extends else 1
            return replace(
                pace, unapplied=checkpoint.id, unapplied_count=count, policy=conv.policy_name
            )

        await self._write(conv, change)
        if superseded and superseded[0] > 0:
            self._listeners.emit(SummaryUnused(conv.policy_name, superseded[0]))

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

    async def _write(self, conv: Conversation, change: Callable[[Pace], Pace]) -> bool:
        """Apply ``change`` to the stored record; whether it was written (never raises)."""

        def edit(entry: Entry | None) -> Entry:
            pace = change(Pace.from_entry(entry))
            return {**(entry or {}), PACE_KEY: asdict(pace)}

        try:
            return await self._ledgers.update(conv.tenant, conv.conversation_id, edit) is not None
        except Exception:  # fail open: the pace steers ahead-of-time work, never a request
            logger.exception("pace update failed")
            return False

    async def join(self) -> None:
        """Wait for the writes under way (tests and shutdown)."""
        await self._writes.join()
