"""The overflow rescue: after the provider answered that the context was too long, the request
is compacted as hard as the rules allow and sent once more (docs/architecture.md).

The window the answer stated has just been learned (``ModelInfos.learn``), so the retry aims
below it; when the window is still unknown (or wrong: the provider refused less than it), it
aims at half of what failed. A ``summarize`` policy summarizes what the harder cut leaves out
(mode ``rescue``); when even that fails, the budget still trims what it must. A retry that would
not be smaller is not sent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import OverflowRetry
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.offload import work
from proxy.compaction.planning import plan_with
from proxy.compaction.summaries.making import Summaries
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.core.plan import Plan
from proxy.core.tokens import TokenCounter
from proxy.errors import SummarizerError
from proxy.events import Listeners

logger = logging.getLogger("proxy.compaction")

# What an overflow retry aims for when the model's window is unknown: half of what failed.
_UNKNOWN_WINDOW_RETRY_FRACTION = 0.5
# Room left for the reply when a retry compacts to the model's window.
_RETRY_WINDOW_FRACTION = 0.85

_RETRIED = OverflowRetry("retried")
_NOT_SMALLER = OverflowRetry("not_smaller")


@dataclass(frozen=True)
class Rescued:
    """The harder plan to send instead, for the conversation as now known (its window)."""

    conv: Conversation
    plan: Plan
    outcome: str  # applied, or failed (its summary could not be made)


class OverflowRescue:
    """Plans the one retry after a context overflow."""

    def __init__(
        self,
        *,
        stored: StoredCheckpoints,
        summaries: Summaries,
        models: ModelInfos,
        counter: TokenCounter,
        listeners: Listeners,
    ) -> None:
        self._stored = stored
        self._summaries = summaries
        self._models = models
        self._counter = counter
        self._listeners = listeners

    async def harder(self, conv: Conversation, sent: Plan) -> Rescued | None:
        """The plan to retry with, or None when it cannot be made smaller than ``sent``."""
        conv = replace(conv, model_info=self._models.info(conv.model))  # a window just learned
        window = conv.model_info.context_window if conv.model_info else 0
        budget = int(window * _RETRY_WINDOW_FRACTION)
        if budget >= sent.tokens_after:  # unknown, or wrong: the provider refused less than it
            budget = int(sent.tokens_after * _UNKNOWN_WINDOW_RETRY_FRACTION)
        checkpoint = await self._stored.by_id(conv, sent.applied_checkpoint)
        again = partial(plan_with, conv, counter=self._counter, force=True, budget=budget)
        harder = await work(conv.heavy, again, checkpoint)
        wanted = harder.summary_request
        outcome = "applied"
        if conv.policy.strategy == "summarize" and wanted is not None:
            try:
                made = await self._summaries.summarize_now(
                    conv, wanted, harder.applied_checkpoint, mode="rescue"
                )
                harder = await work(conv.heavy, again, made)
            except SummarizerError as exc:
                logger.warning("summary for the overflow retry failed: %s", exc.message)
                outcome = "failed"  # the budget still trims what it must
        if harder.tokens_after >= sent.tokens_after:
            self._listeners.emit(_NOT_SMALLER)
            return None
        self._listeners.emit(_RETRIED)
        return Rescued(conv, harder, outcome)
