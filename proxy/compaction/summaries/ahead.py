"""Summaries made ahead of time: the next summary, asked for when a trigger is near, is made
in the background once the answer has been relayed, so that no turn waits for it.

At most one per conversation is queued or running (``BackgroundQueue``); when the queue is full
it is dropped and told (``AheadOfTimeDropped``): a later turn asks again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import AheadOfTimeDropped
from proxy.compaction.summaries.background import BackgroundQueue
from proxy.compaction.summaries.making import Summaries
from proxy.compaction.summaries.prefix_summary import PrefixSource
from proxy.core.plan import SummaryRequest
from proxy.errors import SummarizerError
from proxy.events import Listeners

logger = logging.getLogger("proxy.compaction")

_DROPPED = AheadOfTimeDropped()


@dataclass(frozen=True, eq=False)
class PendingSummary:
    """One summary to make once the answer is relayed; it is its own background job."""

    conv: Conversation
    wanted: SummaryRequest
    parent_id: str | None
    fired: bool  # a trigger fired (rather than only being near): it applies from the next turn
    ahead: AheadOfTime
    # The request it follows, to ask the summary on the prompt just cached (None: quoted).
    prefix: PrefixSource | None = None

    def schedule(self) -> None:
        """Queue it (must not block: called as the answer ends)."""
        self.ahead.schedule(self)

    async def __call__(self) -> None:
        await self.ahead.make(self)


class AheadOfTime:
    """Queues pending summaries and makes them in the background."""

    def __init__(
        self, *, background: BackgroundQueue, summaries: Summaries, listeners: Listeners
    ) -> None:
        self._background = background
        self._summaries = summaries
        self._listeners = listeners

    def pending(
        self, conv: Conversation, wanted: SummaryRequest, parent_id: str | None, *, fired: bool
    ) -> PendingSummary:
        return PendingSummary(conv, wanted, parent_id, fired, self)

    def schedule(self, pending: PendingSummary) -> None:
        key = pending.conv.key
        if not self._background.submit(key, pending) and not self._background.busy(key):
            self._listeners.emit(_DROPPED)

    async def make(self, pending: PendingSummary) -> None:
        try:
            await self._summaries.summarize_unless_busy(
                pending.conv,
                pending.wanted,
                pending.parent_id,
                mode="ahead",
                triggered=pending.fired,
                prefix=pending.prefix,
            )
        except SummarizerError as exc:
            logger.warning("background summary failed: %s", exc.message)
