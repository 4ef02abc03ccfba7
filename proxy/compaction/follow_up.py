"""What compaction does once the provider has answered a request it planned: the
``proxy.compaction.decision.FollowUp`` of every planned decision.

Three named steps, each called by the route's forwarder: ``observe`` learns from the answer (a
window from an overflow answer, a token factor from a successful one's usage) and prices it into
the conversation's ledger (``proxy.compaction.money.spending``), ``replacement``
plans the one retry after an overflow (``proxy.compaction.rescue``), ``answered`` queues the
summary due ahead of time (``proxy.compaction.summaries.ahead``). Once a replacement was sent, its own
follow-up takes over: what this one is then told goes to it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from proxy import tracing
from proxy.compaction.conversation import Conversation
from proxy.compaction.decision import Decision
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.money.spending import Spending, read_usage
from proxy.compaction.offload import work
from proxy.compaction.render import decided, render
from proxy.compaction.rescue import OverflowRescue
from proxy.compaction.summaries.ahead import PendingSummary
from proxy.core.plan import Plan
from proxy.events import Listeners
from proxy.types import RawHeaders


class PlannedFollowUp:
    """The follow-up of one planned request (``sent``: the plan its body was rendered from)."""

    def __init__(
        self,
        conv: Conversation,
        sent: Plan,
        original: list[dict[str, Any]],
        *,
        models: ModelInfos,
        listeners: Listeners,
        rescue: OverflowRescue | None = None,
        pending: PendingSummary | None = None,
        spending: Spending | None = None,
    ) -> None:
        self._conv = conv
        self._sent = sent
        self._original = original  # the messages as the dialect read them
        self._models = models
        self._listeners = listeners
        self._rescue = rescue  # None once tried, and for a replacement itself
        self._pending = pending
        self._spending = spending
        self._replaced: PlannedFollowUp | None = None

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        if self._replaced is not None:
            self._replaced.observe(status, headers, tail)
            return
        self._models.learn(
            self._conv.model, counted=self._sent.tokens_after, status=status, body=tail
        )
        if status == 200 and self._spending is not None:
            usage = read_usage(self._conv.route, tail)
            if usage is not None:
                tracing.usage(
                    input_tokens=usage.prompt,
                    output_tokens=usage.output,
                    cache_read=usage.cached_read,
                    cache_write=usage.cache_write,
                )
                self._spending.answered(self._conv, self._sent, usage)

    async def replacement(self) -> Decision | None:
        rescue, self._rescue = self._rescue, None
        if rescue is None:
            return None
        rescued = await rescue.harder(self._conv, self._sent)
        if rescued is None:
            return None
        conv, harder = rescued.conv, rescued.plan
        self._listeners.emit(decided(conv, harder, rescued.outcome))
        body, headers = await work(
            conv.heavy,
            partial(render, conv, harder, self._original, rescued.outcome, retried=True),
        )
        self._replaced = PlannedFollowUp(
            conv,
            harder,
            self._original,
            models=self._models,
            listeners=self._listeners,
            spending=self._spending,
        )
        return Decision(body=body, response_headers=headers, follow_up=self._replaced)

    def answered(self) -> None:
        if self._replaced is not None:
            self._replaced.answered()
        elif self._pending is not None:
            self._pending.schedule()
