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
from typing import Any

from proxy import tracing
from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation, Conversations
from proxy.compaction.decision import Decision, Incoming
from proxy.compaction.dialect.native import NATIVE, planned_policy
from proxy.compaction.dialect.translation import Neutral, Translator
from proxy.compaction.follow_up import PlannedFollowUp
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.money.pace import Pace, Paces, due
from proxy.compaction.money.paying import PriceTrigger
from proxy.compaction.money.spending import Spending
from proxy.compaction.native.calls import NativeCalls, NativeRequest, unchanged
from proxy.compaction.offload import is_heavy, work
from proxy.compaction.planning import must_summarize_now, outcome_of, plan_with
from proxy.compaction.policies import choose_policy
from proxy.compaction.recall.tool import Recall
from proxy.compaction.render import OFF, decided, render
from proxy.compaction.rescue import OverflowRescue
from proxy.compaction.review import PlanReview
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.ahead import AheadOfTime, PendingSummary
from proxy.compaction.summaries.focus import asked_focus
from proxy.compaction.summaries.making import Summaries
from proxy.compaction.summaries.prefix_summary import PrefixSource
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.core.checkpoints import Checkpoint, Record
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.tokens import TokenCounter
from proxy.errors import PayloadTooLarge, SummarizerError
from proxy.events import Listeners
from proxy.state.tenancy import Tenancy, credential_from_headers, resolve_conversation_id
from proxy.types import HeaderView, RawHeaders

logger = logging.getLogger("proxy.compaction")


class Rewriter:
    """Turns one request into its ``Decision``."""

    def __init__(
        self,
        settings: CompactionSettings,
        *,
        tenancy: Tenancy,
        counter: TokenCounter,
        conversations: Conversations,
        stored: StoredCheckpoints,
        summaries: Summaries,
        ahead: AheadOfTime,
        rescue: OverflowRescue,
        models: ModelInfos,
        review: PlanReview,
        listeners: Listeners,
        spending: Spending | None = None,
        paces: Paces | None = None,
        price: PriceTrigger | None = None,
        recall: Recall | None = None,
    ) -> None:
        self._settings = settings
        self._tenancy = tenancy
        self._counter = counter
        self._conversations = conversations
        self._stored = stored
        self._summaries = summaries
        self._ahead = ahead
        self._rescue = rescue
        self._models = models
        self._review = review
        self._listeners = listeners
        self._spending = spending
        self._paces = paces
        self._price = price
        # strategy: native: the provider's own context management.
        self._natives = NativeCalls(models=models, listeners=listeners, spending=spending)
        self._recall = recall
        self._short_told: set[str] = set()  # policies whose numbers the log said fall short

    def decided_by_headers(self, headers: HeaderView) -> RawHeaders | None:
        """The response headers of a request the headers alone send through untouched, or None.
        Such a request is never parsed (a relay must not pay for what it does not read): its
        bytes go out as they came."""
        untouched = self._settings.untouched(headers)
        return None if untouched is None else self._off(untouched.policy)

    async def decide(self, incoming: Incoming) -> Decision:
        focus = asked_focus(incoming.headers)  # a bad one is a 400 before anything is read
        decided_headers = self.decided_by_headers(incoming.headers)
        if decided_headers is not None:
            body = None if incoming.streamable else await incoming.body.read()
            return Decision(body=body, response_headers=decided_headers)
        raw = await incoming.body.read()
        # Each message's key is computed once per request; later looks find it by identity.
        with self._counter.facts.request() as facts:
            return await self._decide(incoming, raw, facts, focus)

    async def _decide(
        self, incoming: Incoming, raw: bytes, facts: FactLookup, focus: str | None
    ) -> Decision:
        headers, dialect = incoming.headers, incoming.dialect
        conversation = self._settings.conversation
        tenant = self._tenancy.tenant(credential_from_headers(headers.values, conversation))
        # Parsing, validation, planning and encoding are pure CPU: for a big body they run in a
        # worker thread so that other clients' requests are not held up meanwhile.
        heavy = is_heavy(raw)
        body = await work(heavy, dialect.parse, raw)
        model = body.get("model") or ""
        policy_name, policy = choose_policy(self._settings, headers, model=model, tenant=tenant)
        tracing.request_model(model)
        if policy.strategy == "off":  # chosen by a route
            return self._untouched(raw, policy_name)
        native_adapter = self._natives.adapter(dialect, policy, model, tenant)
        fell_back = policy.strategy == NATIVE and native_adapter is None
        if policy.strategy == NATIVE:
            policy = planned_policy(policy, native=native_adapter is not None)
        native = None
        if native_adapter is not None:
            native = NativeRequest(
                native_adapter,
                dialect.name,
                model,
                tenant,
                policy_name,
                policy,
                headers,
                body,
                raw,
                streaming=body.get("stream") is True,
            )
        neutral = await work(heavy, self._neutral_of, dialect, body, facts)
        if neutral is None:  # the provider holds this history (e.g. previous_response_id)
            if native is not None:  # compacted by the provider all the same
                return self._natives.decision(native)
            return self._untouched(raw, policy_name)
        messages = neutral.messages
        conversation_id = resolve_conversation_id(
            headers.values, messages, tenant=tenant, tenancy=self._tenancy, settings=conversation
        )
        if conversation_id is None:
            return self._natives.decision(native) if native else self._untouched(raw, policy_name)
        # The caller's key, where the route says it is valid (an Anthropic key never goes to
        # the OpenAI upstream's /models, nor to its summarizer).
        credentials = incoming.credentials
        self._models.windows.want(model, credentials, policy)  # never waits
        conv = await work(  # strips incoming summaries: a pass over every message
            heavy,
            partial(
                self._conversations.build,
                tenant,
                conversation_id,
                body,
                neutral,
                policy_name,
                policy,
                credentials=credentials,
                raw=raw,
                heavy=heavy,
                dialect=dialect,
                facts=facts,
            ),
        )
        if focus is not None:
            conv = replace(conv, focus=focus)
        record = await self._stored.record(conv)
        pinned = protocol.pinned_checkpoint(headers)
        checkpoint, current = await work(heavy, self._plan_applying, conv, record, pinned)
        # Native: the provider compacts; the plan only counts (and may shadow): no price trigger.
        priced = pinned is None and native is None
        pace = await self._pace_if_needed(conv, current, priced=priced)
        if priced and self._price is not None and self._paces is not None:
            now = self._paces.clock()
            current = await work(heavy, self._price.decide, conv, current, checkpoint, pace, now)
        outcome = None
        wanted = current.summary_request
        inline = native is None and must_summarize_now(conv, current)
        if wanted is not None and current.fired and inline:
            try:
                made = await self._summaries.summarize_now(
                    conv, wanted, current.applied_checkpoint, mode="inline"
                )
                current = await work(heavy, partial(plan_with, conv, made, counter=self._counter))
            except SummarizerError as exc:
                logger.warning("inline summary failed, forwarding the best state: %s", exc.message)
                outcome = "failed"
            wanted = current.summary_request
        pending = None
        ahead = wanted is not None and current.near and policy.mode == "ahead"
        if native is not None:  # only a shadow summary, stored and never sent
            ahead = wanted is not None and current.near and policy.native.shadow_summary
        if ahead and wanted is not None and self._ahead_due(conv, current, pace):
            fired = bool(current.fired)
            pending = self._ahead.pending(conv, wanted, current.applied_checkpoint, fired=fired)
        if native is not None:
            return self._native_decision(native, conv, current, messages, pending)
        outcome = outcome or outcome_of(current, pending=pending is not None)
        if current.headroom_short is not None:
            self._tell_short(policy_name, *current.headroom_short)
        current = await self._review.before_send(conv, current)
        self._listeners.emit(decided(conv, current, outcome))
        session = None
        if self._recall is not None:  # stubs and the summary name what they stand for
            planned = current.tokens_after
            current, session = await self._recall.prepare(conv, current)
            if current.tokens_after != planned and tracing.is_on():  # no span: an attribute
                tracing.annotate({"compaction.recall.notes_tokens": current.tokens_after - planned})
        offer = session.with_tool if session is not None else None
        sent, added = await work(
            heavy, partial(render, conv, current, messages, outcome, offer=offer)
        )
        if policy.ledger_header and self._spending is not None:
            ledger = await self._spending.header(conv)
            added = added if ledger is None else [*added, ledger]
        if pending is not None and incoming.call is not None:
            # The summary asked on the prompt the provider is about to cache, so the summary call
            # reads it from the cache too.
            pending = replace(pending, prefix=PrefixSource(sent, dialect, incoming.call))
        if self._price is not None and self._price.cannot_price(conv):
            added = [*added, protocol.unpriced_warning(self._price.reference)]
        if fell_back:  # native asked for where the provider offers none: which strategy ran
            added = [*added, (protocol.STRATEGY_BYTES, policy.strategy.encode())]
        return Decision(
            body=sent,
            response_headers=added,
            follow_up=self._follow_up(
                conv, current, messages, pending, paced=policy.strategy == "summarize"
            ),
            streaming=body.get("stream") is True,
            recall=session,
        )

    def _native_decision(
        self,
        native: NativeRequest,
        conv: Conversation,
        current: Plan,
        messages: list[dict[str, Any]],
        pending: PendingSummary | None,
    ) -> Decision:
        """The request as the client sent it plus the provider's context management; the plan
        only counts it and, with ``shadow_summary``, asks for the summary never sent."""
        sent = unchanged(current)
        follow_up = self._follow_up(conv, sent, messages, pending)
        return self._natives.decision(native, conv=conv, current=sent, inner=follow_up)

    def _follow_up(
        self,
        conv: Conversation,
        sent: Plan,
        messages: list[dict[str, Any]],
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

    def _ahead_due(self, conv: Conversation, current: Plan, pace: Pace | None) -> bool:
        """Whether the summary a near trigger asks for is made after this answer: when the
        conversation's growth reaches the trigger within ``ahead_turns`` (``proxy.compaction.money.pace``)."""
        if current.fired or self._paces is None:
            return True
        return due(conv, current, pace)

    def _neutral_of(
        self, dialect: Translator, body: dict[str, Any], facts: FactLookup
    ) -> Neutral | None:
        neutral = dialect.conversation(body, facts=facts)
        if neutral is None:
            return None
        messages = neutral.messages
        limit = self._settings.max_messages
        if len(messages) > limit:
            field = dialect.history_field  # counted in the core's messages
            raise PayloadTooLarge(
                f"'{field}' holds {len(messages)} messages; this proxy compacts at most {limit} "
                "(server.max_messages)",
                param=field,
                code="too_many_messages",
            )
        return neutral

    def _plan_applying(
        self, conv: Conversation, record: Record | None, pinned: str | None
    ) -> tuple[Checkpoint | None, Plan]:
        """The checkpoint to apply (the deepest, or the one the request pins:
        ``proxy.compaction.summaries.pinning``, applied even before a trigger fires, and read-only) and
        the plan with it. Blocking: matching the history's hash chain is CPU work."""
        checkpoint = self._stored.to_apply(conv, record, pinned)
        if pinned is None or checkpoint is None or checkpoint.id != pinned:
            return checkpoint, plan_with(conv, checkpoint, counter=self._counter)
        pinned_plan = plan_with(conv, replace(checkpoint, strategy="pinned"), counter=self._counter)
        return checkpoint, replace(pinned_plan, summary_request=None)

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
