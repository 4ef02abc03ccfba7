"""What compaction does once the provider has answered a request it planned: the
``proxy.compaction.decision.FollowUp`` of every planned decision.

Three named steps, each called by the route's forwarder: ``observe`` learns from the answer (a
window from an overflow answer, a token factor from a successful one's usage) and writes the
conversation's books once (``proxy.compaction.money.spending``: the answer's price and timeline
point, and the request's pace sample when its policy summarizes), ``replacement``
plans the one retry after an overflow (``proxy.compaction.rescue``), ``answered`` queues the
summary due ahead of time (``proxy.compaction.summaries.ahead``). Once a replacement was sent, its own
follow-up takes over: what this one is then told goes to it.
"""

from __future__ import annotations

from functools import partial

from proxy import tracing
from proxy.compaction.conversation import Conversation
from proxy.compaction.decision import Decision
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.money.books import PaceSample
from proxy.compaction.money.spending import Spending, read_usage
from proxy.compaction.offload import work
from proxy.compaction.render import decided, render
from proxy.compaction.rescue import OverflowRescue
from proxy.compaction.summaries.ahead import PendingSummary
from proxy.core.plan import Plan
from proxy.events import Listeners
from proxy.types import ChatMessage, RawHeaders


class PlannedFollowUp:
    """The follow-up of one planned request (``sent``: the plan its body was rendered from)."""

    def __init__(
        self,
        conv: Conversation,
        sent: Plan,
        original: list[ChatMessage],
        *,
        models: ModelInfos,
        listeners: Listeners,
        rescue: OverflowRescue | None = None,
        pending: PendingSummary | None = None,
        spending: Spending | None = None,
        paced: bool = False,
    ) -> None:
        """``paced``: the request is a sample of the conversation's pace (ahead mode and the
        price trigger read it), written with the answer's books."""
        self._conv = conv
        self._sent = sent
        self._original = original  # the messages as the dialect read them
        self._models = models
        self._listeners = listeners
        self._rescue = rescue  # None once tried, and for a replacement itself
        self._pending = pending
        self._spending = spending
        self._pace = _sample(conv, sent) if paced and spending is not None else None
        self._replaced: PlannedFollowUp | None = None

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        if self._replaced is not None:
            self._replaced.observe(status, headers, tail)
            return
        self._models.learn(
            self._conv.model, counted=self._sent.tokens_after, status=status, body=tail
        )
        if self._spending is None:
            return
        usage = read_usage(self._conv.route, tail) if status == 200 else None
        if usage is not None and tracing.on:
            tracing.usage(
                input_tokens=usage.prompt,
                output_tokens=usage.output,
                cache_read=usage.cached_read,
                cache_write=usage.cache_write,
            )
        pace, self._pace = self._pace, None  # the request's sample: once, whatever came after
        self._spending.answered(self._conv, self._sent, usage, pace=pace)

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
        # Not yet told an answer (an overflow inside a stream): the sample goes with the next.
        self._replaced._pace, self._pace = self._pace, None
        return Decision(body=body, response_headers=headers, follow_up=self._replaced)

    def answered(self) -> None:
        if self._replaced is not None:
            self._replaced.answered()
            return
        if self._pace is not None and self._spending is not None:
            # Answered without being observed (its answer was the recall rounds'): the sample.
            self._spending.answered(self._conv, self._sent, None, pace=self._pace)
            self._pace = None
        if self._pending is not None:
            self._pending.schedule()


def _sample(conv: Conversation, sent: Plan) -> PaceSample:
    applied = sent.applied_checkpoint if sent.changed else None
    return PaceSample(sent.tokens_before, applied, conv.policy_name)
