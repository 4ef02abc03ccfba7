"""One request's decision: decide -> plan -> render (docs/architecture.md, "The request path").

    headers alone (X-Compaction: off, no conversation, a policy that is off) -> sent untouched
    read the body -> parse (the dialect) -> policy -> neutral conversation -> conversation id
    -> load state (one store read) -> plan with the checkpoint that applies
    -> summarize inline if it must -> the plan reviewed (before_send hooks) -> render

Everything here fails open: a store or summarizer failure leaves the request as good as the best
state available (the previous checkpoint or the original messages), never a 5xx. Bad input is a
400 before anything is stored or forwarded.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import TypeVar

from proxy import tracing
from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation
from proxy.compaction.decision import AnswerStage, Decision, Incoming
from proxy.compaction.dialect.native import NATIVE, NativeAdapter, planned_policy
from proxy.compaction.follow_up import PlannedFollowUp
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.money.pace import Pace, Paces, due
from proxy.compaction.money.paying import PriceTrigger
from proxy.compaction.money.spending import Spending
from proxy.compaction.native.calls import NativeCalls, NativeRequest, unchanged
from proxy.compaction.planning import may_pay, must_summarize_now, outcome_of, plan_with
from proxy.compaction.policies import untouched
from proxy.compaction.reading import Asked, Planned, Reader, cpu
from proxy.compaction.recall.tool import Recall, RecallSession
from proxy.compaction.render import OFF, decided, render
from proxy.compaction.rescue import OverflowRescue
from proxy.compaction.review import PlanReview
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.ahead import AheadOfTime, PendingSummary
from proxy.compaction.summaries.focus import asked_focus
from proxy.compaction.summaries.making import Summaries
from proxy.compaction.summaries.prefix_summary import PrefixSource
from proxy.core.plan import Plan
from proxy.core.tokens import TokenCounter
from proxy.economics.prices import PriceTable
from proxy.errors import SummarizerError
from proxy.events import Listeners
from proxy.types import ChatMessage, HeaderView, RawHeaders

logger = logging.getLogger("proxy.compaction")
T = TypeVar("T")


class Rewriter:
    """Turns one request into its ``Decision``."""

    def __init__(
        self,
        settings: CompactionSettings,
        *,
        reader: Reader,
        counter: TokenCounter,
        summaries: Summaries,
        ahead: AheadOfTime,
        rescue: OverflowRescue,
        models: ModelInfos,
        review: PlanReview | None,
        listeners: Listeners,
        spending: Spending | None = None,
        paces: Paces | None = None,
        price: PriceTrigger | None = None,
        prices: PriceTable | None = None,
        recall: Recall | None = None,
    ) -> None:
        self._settings = settings
        self._reader = reader  # parses and plans
        self._counter = counter
        self._summaries = summaries
        self._ahead = ahead
        self._rescue = rescue
        self._models = models
        self._review = review  # None: no before_send hook looks at plans
        self._listeners = listeners
        self._spending = spending
        self._paces = paces
        self._price = price
        self._prices = prices
        # strategy: native: the provider's own context management.
        self._natives = NativeCalls(models=models, listeners=listeners, spending=spending)
        self._recall = recall
        self._short_told: set[str] = set()  # policies whose numbers the log said fall short

    def decided_by_headers(self, headers: HeaderView) -> RawHeaders | None:
        """The response headers of a request the headers alone send through untouched, or None.
        Such a request is never parsed (a relay must not pay for what it does not read): its
        bytes go out as they came."""
        alone = untouched(self._settings, headers)
        return None if alone is None else self._off(alone.policy)

    async def decide(self, incoming: Incoming) -> Decision:
        headers = incoming.headers
        # A bad focus is a 400 before anything is read.
        focus = asked_focus(headers) if protocol.FOCUS in headers else None
        decided_headers = self.decided_by_headers(headers)
        if decided_headers is not None:
            body = None if incoming.streamable else await incoming.body.read()
            return Decision(body=body, response_headers=decided_headers)
        raw = await incoming.body.read()
        # Each message's key is computed once per request; later looks find it by identity.
        with self._counter.facts.request() as facts:
            asked = await self._reader.read(incoming, raw, facts, focus)
            policy = asked.policy
            if policy.strategy == "off":  # chosen by a route
                return self._untouched(raw, asked.policy_name)
            if policy.strategy == NATIVE:
                adapter = self._natives.adapter(incoming.dialect, policy, asked.model, asked.tenant)
                if adapter is not None:
                    return await self._native(asked, adapter)
                # The provider offers none: the policy's fallback runs, and the answer says so.
                fallback = planned_policy(policy, native=False)
                asked = replace(asked, policy=fallback, fell_back=True)
            planned = await self._reader.plan(asked)
            if planned is None:
                return self._untouched(raw, asked.policy_name)
            return await self._compacted(asked, planned)

    async def _native(self, asked: Asked, adapter: NativeAdapter) -> Decision:
        """The request as the client sent it plus the provider's context management; the plan
        only counts it and, with ``shadow_summary``, asks for the summary never sent."""
        policy = planned_policy(asked.policy, native=True)
        incoming = asked.incoming
        native = NativeRequest(
            adapter,
            incoming.dialect.name,
            asked.model,
            asked.tenant,
            asked.policy_name,
            policy,
            incoming.headers,
            asked.body,
            asked.raw,
            streaming=asked.body.get("stream") is True,
            stages=incoming.stages,
        )
        planned = await self._reader.plan(replace(asked, policy=policy))
        if planned is None:  # compacted by the provider all the same
            return self._natives.decision(native)
        conv, current = planned.conv, planned.current
        pace = await self._pace_if_needed(conv, current, priced=False)
        pending = None
        if policy.native.shadow_summary:  # only a shadow summary, stored and never sent
            pending = self._pending(conv, current, pace)
        sent = unchanged(current)
        follow_up = self._follow_up(conv, sent, planned.messages, pending)
        return self._natives.decision(native, conv=conv, current=sent, inner=follow_up)

    async def _compacted(self, asked: Asked, planned: Planned) -> Decision:
        """The proxy's own compaction: the plan (priced, summarized inline when it must, a
        summary queued for after the answer, reviewed), rendered."""
        conv, current, heavy = planned.conv, planned.current, asked.heavy
        current, pace = await self._priced(conv, current, planned, heavy)
        current, failed = await self._inline(conv, current, heavy)
        pending = None
        if conv.policy.mode == "ahead":
            pending = self._pending(conv, current, pace)
        outcome = "failed" if failed else outcome_of(current, pending=pending is not None)
        if current.headroom_short is not None:
            self._tell_short(asked.policy_name, *current.headroom_short)
        if self._review is not None:
            current = await self._review.before_send(conv, current)
        self._listeners.emit(decided(conv, current, outcome))
        session = None
        if self._recall is not None and (current.cleared or current.summary_text):
            current, session = await self._recalled(conv, current)
        offer = session.with_tool if session is not None else None
        sent, added = await cpu(
            heavy, partial(render, conv, current, planned.messages, outcome, offer=offer)
        )
        added = [*added, *await self._warnings(conv, asked)]
        call = asked.incoming.call
        if pending is not None and call is not None:
            # The summary asked on the prompt the provider is about to cache, so the summary call
            # reads it from the cache too.
            pending = replace(pending, prefix=PrefixSource(sent, asked.incoming.dialect, call))
        paced = conv.policy.strategy == "summarize"  # its growth is a sample of the pace
        follow_up = self._follow_up(conv, current, planned.messages, pending, paced=paced)
        return Decision(
            body=sent,
            response_headers=added,
            follow_up=follow_up,
            streaming=asked.body.get("stream") is True,
            stages=self._stages(asked.incoming, follow_up, session),
        )

    def _stages(
        self, incoming: Incoming, follow_up: PlannedFollowUp, session: RecallSession | None
    ) -> tuple[AnswerStage, ...]:
        """What the route does with the answer: rescue an overflow (any prompt may overflow; the
        stage looks only at the answers that can say so), and answer the model's recall calls
        when the request went out with the tool."""
        stages = incoming.stages
        if stages is None:
            return ()
        if session is None:
            return (stages.rescue(follow_up),)
        return (stages.rescue(follow_up), stages.recall(session))

    async def _priced(
        self, conv: Conversation, current: Plan, planned: Planned, heavy: bool
    ) -> tuple[Plan, Pace | None]:
        """The plan the price trigger sends (``proxy.compaction.money.paying``), and the
        conversation's pace when the trigger or ahead mode looks at it. A pinned request is
        read-only: never priced."""
        priced = planned.pinned is None and self._price is not None and may_pay(conv, current)
        pace = await self._pace_if_needed(conv, current, priced=priced)
        if priced and self._price is not None and self._paces is not None:
            now = self._paces.clock()
            check = partial(self._price.decide, conv, current, planned.checkpoint, pace, now)
            current = await cpu(heavy, check)
        return current, pace

    async def _inline(self, conv: Conversation, current: Plan, heavy: bool) -> tuple[Plan, bool]:
        """The plan with the summary made now when it must be (True: it failed, and the best
        state available is sent)."""
        wanted = current.summary_request
        if wanted is None or not current.fired or not must_summarize_now(conv, current):
            return current, False
        try:
            made = await self._summaries.summarize_now(
                conv, wanted, current.applied_checkpoint, mode="inline"
            )
        except SummarizerError as exc:
            logger.warning("inline summary failed, forwarding the best state: %s", exc.message)
            return current, True
        return await cpu(heavy, partial(plan_with, conv, made, counter=self._counter)), False

    def _pending(
        self, conv: Conversation, current: Plan, pace: Pace | None
    ) -> PendingSummary | None:
        """The summary a near trigger asks for, made after this answer when the conversation's
        growth reaches the trigger within ``ahead_turns`` (``proxy.compaction.money.pace``)."""
        wanted = current.summary_request
        if wanted is None or not current.near:
            return None
        if not current.fired and self._paces is not None and not due(conv, current, pace):
            return None
        fired = bool(current.fired)
        return self._ahead.pending(conv, wanted, current.applied_checkpoint, fired=fired)

    async def _recalled(
        self, conv: Conversation, current: Plan
    ) -> tuple[Plan, RecallSession | None]:
        """The plan whose stubs and summary name what they stand for, and the recall session
        of a request that gets the tool."""
        assert self._recall is not None
        planned = current.tokens_after
        current, session = await self._recall.prepare(conv, current)
        if current.tokens_after != planned and tracing.on:  # no span: an attribute
            tracing.annotate({"compaction.recall.notes_tokens": current.tokens_after - planned})
        return current, session

    async def _warnings(self, conv: Conversation, asked: Asked) -> RawHeaders:
        """The headers the answer gains besides the plan's: the conversation's ledger, a model
        the price trigger cannot price, the strategy that ran in native's place."""
        added: RawHeaders = []
        policy = conv.policy
        if policy.ledger_header and self._spending is not None:
            ledger = await self._spending.header(conv)
            added = added if ledger is None else [*added, ledger]
        prices = self._prices
        pays = policy.strategy == "summarize" and policy.trigger.pays
        if pays and prices is not None and not prices.price(conv.model).priced:
            # The decision assumes the reference prices, or leaves it to the token thresholds.
            added = [*added, protocol.unpriced_warning(prices.reference)]
        if asked.fell_back:
            added = [*added, (protocol.STRATEGY_BYTES, policy.strategy.encode())]
        return added

    def _follow_up(
        self,
        conv: Conversation,
        sent: Plan,
        messages: list[ChatMessage],
        pending: PendingSummary | None,
        *,
        paced: bool = False,
    ) -> PlannedFollowUp:
        """What is done with the answer to ``sent`` (usage, windows, the overflow rescue, the
        summary queued after it; ``paced``: its pace sample)."""
        return PlannedFollowUp(
            conv,
            sent,
            messages,
            models=self._models,
            listeners=self._listeners,
            rescue=self._rescue,
            pending=pending,
            spending=self._spending,
            paced=paced and self._paces is not None,
        )

    async def _pace_if_needed(
        self, conv: Conversation, current: Plan, *, priced: bool
    ) -> Pace | None:
        """The conversation's pace, read (one store read) only when the price trigger or ahead
        mode will look at it; None otherwise or when the store did not answer."""
        if self._paces is None:
            return None
        looks = priced and self._price is not None and self._price.looks_at(conv, current)
        ahead = conv.policy.mode == "ahead" and current.near and not current.fired
        return await self._paces.read(conv) if looks or ahead else None

    def _tell_short(self, policy: str, fixed_tokens: int, next_summary_at: int) -> None:
        """Once per policy: its trigger leaves no room above the prompt's fixed part."""
        if policy in self._short_told:
            return
        self._short_told.add(policy)
        logger.warning(
            "policy %r: the fixed prompt (system, tools and summary: %d tokens) leaves a "
            "compaction no room to grow before the next summary starts at %d tokens, so "
            "summaries come every few turns; raise the trigger or soft_fraction "
            "(X-Compaction-Warning: headroom)",
            policy,
            fixed_tokens,
            next_summary_at,
        )

    def _untouched(self, raw: bytes, policy: str) -> Decision:
        return Decision(body=raw, response_headers=self._off(policy))

    def _off(self, policy: str | None = None) -> RawHeaders:
        self._listeners.emit(OFF)
        return protocol.response_headers("off", policy=policy)
