"""One request sent with the provider's own context management (``strategy: native``):
the decision to send, and what is done with the answer.

The body goes out as the client sent it plus the context management the policy implies
(``proxy.compaction.dialect.native``; the client's own fields win), with the beta flags those need
merged into the client's ``anthropic-beta``. ``NativeCall`` is both the decision's ``native``
(what the forwarder asks: did the provider refuse the fields? what do the response headers say
it did?) and its follow-up (what it did goes to the events, the metrics and the ledger; a
shadow summary is queued after the answer; an overflow is rescued from the shadow checkpoint).

A provider that refuses the fields gets the client's request again without them, once. When the
refusal named what only the proxy added and that retry was answered, the model runs the
policy's ``native.fallback`` for a while (``native.Unsupported``): one tenant's own bad beta flag
or field never turns native off for the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from proxy import wirejson
from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation
from proxy.compaction.decision import AnswerStage, AnswerStages, Decision, FollowUp
from proxy.compaction.dialect.native import NATIVE, NativeAdapter, NativeReport, Unsupported, ask_of
from proxy.compaction.dialect.translation import Translator
from proxy.compaction.events import CompactionDecided
from proxy.compaction.follow_up import PlannedFollowUp
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.money.spending import Spending, read_usage
from proxy.compaction.render import with_cache_key
from proxy.core.plan import Plan
from proxy.core.policy import PolicySettings
from proxy.events import Listeners
from proxy.types import HeaderView, RawHeaders

BETA = "anthropic-beta"
logger = logging.getLogger("proxy.compaction")


@dataclass(frozen=True, slots=True)
class NativeReported:
    """What the provider's context management did for one answered request."""

    route: str
    policy: str
    edits: tuple[str, ...]  # empty: it was asked for and did nothing (under its trigger)
    cleared_tool_uses: int
    cleared_input_tokens: int
    compactions: int


@dataclass(frozen=True, slots=True)
class NativeRefused:
    """A provider refused the context-management fields: the request was sent again without."""

    route: str


@dataclass(frozen=True)
class NativeRequest:
    """One request under ``native``: what the rewriter knows of it."""

    adapter: NativeAdapter
    route: str
    model: str
    tenant: str
    policy_name: str
    policy: PolicySettings  # the native policy as configured
    headers: HeaderView
    body: dict[str, Any]
    raw: bytes
    streaming: bool
    stages: AnswerStages | None = None  # the route's: the native report, the overflow rescue

    def rescue(self, follow_up: FollowUp | None) -> tuple[AnswerStage, ...]:
        """The overflow rescue of a request whose history the proxy holds (``follow_up``)."""
        if follow_up is None or self.stages is None:
            return ()
        return (self.stages.rescue(follow_up),)


class NativeCalls:
    """Builds the decisions of requests under ``native``; remembers the refusals."""

    def __init__(
        self, *, models: ModelInfos, listeners: Listeners, spending: Spending | None
    ) -> None:
        self._models = models
        self._listeners = listeners
        self._spending = spending
        self.unsupported = Unsupported()

    def adapter(self, dialect: Translator, policy: PolicySettings, model: str, tenant: str) -> Any:
        """The dialect's context management for a ``native`` policy, or None: not native, the
        API has none (chat completions), or this model's provider refused it lately."""
        if policy.strategy != NATIVE or (dialect.name, model, tenant) in self.unsupported:
            return None
        return dialect.native

    def decision(
        self,
        request: NativeRequest,
        *,
        conv: Conversation | None = None,
        current: Plan | None = None,
        inner: PlannedFollowUp | None = None,
    ) -> Decision:
        """The decision for ``request``: ``conv``, ``current`` (planned with the shadow's
        summarize policy) and ``inner`` (its follow-up) when the proxy holds the history.
        Fails open: a failure of ours sends the client's request as it came."""
        try:
            return self._decision(request, conv, current, inner)
        except Exception:
            logger.exception("native context management failed; the request goes out as it came")
            headers = protocol.response_headers("failed", policy=request.policy_name)
            return Decision(
                body=request.raw,
                response_headers=headers,
                follow_up=inner,
                streaming=request.streaming,
                stages=request.rescue(inner),
            )

    def _decision(
        self,
        request: NativeRequest,
        conv: Conversation | None,
        current: Plan | None,
        inner: PlannedFollowUp | None,
    ) -> Decision:
        info = self._models.info(request.model)
        messages = conv.messages if conv is not None else None
        ask = ask_of(request.policy, messages, info.context_window if info else None)
        body, betas = request.adapter.add(request.body, ask)
        if conv is not None:
            body = with_cache_key(conv, body)
        sent = request.raw if body is request.body else wirejson.encode(body)
        # What the proxy sent is what the client sent: nothing of it was cut by us.
        plan = None if current is None else unchanged(current)
        before = plan.tokens_before if plan is not None else None
        self._listeners.emit(CompactionDecided(NATIVE, "delegated", before, before))
        headers = _outcome_headers(request, plan, "delegated")
        refused = _outcome_headers(request, plan, "skipped")[:-1]
        # An overflow is rescued from the shadow summary, after a refusal too.
        rescue = request.rescue(inner)
        plain = Decision(
            body=request.raw,
            response_headers=[*refused, (protocol.NATIVE_BYTES, b"refused")],
            follow_up=inner,
            streaming=request.streaming,
            stages=rescue,
        )
        call = NativeCall(
            request,
            plan,
            added=body is not request.body,
            plain=plain,
            inner=inner,
            conv=conv,
            calls=self,
            listeners=self._listeners,
        )
        reported = () if request.stages is None else (request.stages.native(call),)
        return Decision(
            body=sent,
            response_headers=headers,
            follow_up=call,
            streaming=request.streaming,
            upstream_headers=_betas(request.headers, betas),
            stages=(*reported, *rescue),
        )

    def spend(self, conv: Conversation, sent: Plan, tail: bytes, report: NativeReport) -> bool:
        """Price an answer the provider compacted into the ledger (True: done). Its full
        history is what was billed plus what the provider cleared; its own summarizing is
        priced as a summary at the conversation's model."""
        if self._spending is None:
            return False
        usage = read_usage(conv.route, tail)
        if usage is not None:
            full = usage.prompt + report.cleared_input_tokens
            self._spending.answered(
                conv, replace(sent, tokens_before=full, tokens_after=usage.prompt), usage
            )
        if report.compaction_usage is not None:
            self._spending.summary_made(conv, conv.model, report.compaction_usage.billed())
        return True


class NativeCall:
    """The native stage's ``NativeAttempt`` and the follow-up of one request under ``native``."""

    def __init__(
        self,
        request: NativeRequest,
        sent: Plan | None,
        *,
        added: bool,
        plain: Decision,
        inner: PlannedFollowUp | None,
        conv: Conversation | None,
        calls: NativeCalls,
        listeners: Listeners,
    ) -> None:
        self.plain = plain  # the client's request as it came: sent after a refusal
        self._request = request
        self._sent = sent
        self._inner = inner
        self._conv = conv
        self._calls = calls
        self._listeners = listeners
        self._report: NativeReport | None = None
        self._added = added  # False: the client's own fields won, the proxy sent nothing more
        self._ours = False  # the refusal named what only the proxy sent

    # --- what the forwarder asks -----------------------------------------------------------------

    def refused(self, status: int, decoded: bytes) -> bool:
        """Whether this error answer refuses the fields the proxy added (then sent without)."""
        request = self._request
        if not self._added or not request.adapter.refuses(status, decoded):
            return False
        self._ours = request.adapter.names_ours(decoded, request.body, _flags(request.headers))
        if self._ours:  # a client's own bad flag or field is not the provider refusing ours
            self._listeners.emit(NativeRefused(request.route))
        return True

    def retried(self, status: int) -> None:
        """Remember the model only when the request without the fields was answered."""
        if self._ours and status < 400:
            request = self._request
            self._calls.unsupported.add(request.route, request.model, request.tenant)

    def reported(self, decoded: bytes) -> RawHeaders:
        """The response headers for a whole (decoded) answer: what the provider did."""
        report = self._report = self._request.adapter.report(decoded)
        plan = self._sent
        usage = read_usage(self._request.route, decoded) if report.applied else None
        if plan is not None and usage is not None:
            plan = replace(plan, tokens_after=usage.prompt)  # as the provider counted it
        outcome = "applied" if report.applied else "skipped"
        return [*_outcome_headers(self._request, plan, outcome)[:-1], _detail(report)]

    # --- the follow-up ---------------------------------------------------------------------------

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        if status != 200:
            if self._inner is not None:
                self._inner.observe(status, headers, tail)
            return
        report = self._report or self._request.adapter.report(tail)
        request = self._request
        self._listeners.emit(
            NativeReported(
                route=request.route,
                policy=request.policy_name,
                edits=report.edits,
                cleared_tool_uses=report.cleared_tool_uses,
                cleared_input_tokens=report.cleared_input_tokens,
                compactions=report.compactions,
            )
        )
        # A prompt the provider cut teaches nothing of the proxy's counts: only priced.
        if report.applied and self._conv is not None and self._sent is not None:
            self._calls.spend(self._conv, self._sent, tail, report)
        elif self._inner is not None:
            self._inner.observe(status, headers, tail)

    async def replacement(self) -> Decision | None:
        # An overflow in spite of the provider's compaction: rescued from the shadow summary.
        return None if self._inner is None else await self._inner.replacement()

    def answered(self) -> None:
        if self._inner is not None:
            self._inner.answered()  # the shadow summary, when one is due


def unchanged(current: Plan) -> Plan:
    """``current`` as sent under ``native``: every message, as the client sent it."""
    return replace(
        current,
        messages=current.source,
        tokens_after=current.tokens_before,
        applied_checkpoint=None,
    )


def _outcome_headers(request: NativeRequest, plan: Plan | None, outcome: str) -> RawHeaders:
    """X-Compaction and its figures, the strategy that ran, then the native detail (last)."""
    return [
        *protocol.response_headers(outcome, plan, policy=request.policy_name),
        (protocol.STRATEGY_BYTES, NATIVE.encode()),
        (protocol.NATIVE_BYTES, b"requested"),
    ]


def _detail(report: NativeReport) -> tuple[bytes, bytes]:
    return protocol.NATIVE_BYTES, report.detail().encode()


def _betas(headers: HeaderView, ours: tuple[str, ...]) -> RawHeaders:
    """The ``anthropic-beta`` to send: the client's flags, then ours it did not name."""
    if not ours:
        return []
    theirs = _flags(headers)
    flags = theirs + [f for f in ours if f not in theirs]
    return [(BETA.encode(), ",".join(flags).encode())]


def _flags(headers: HeaderView) -> list[str]:
    """The client's own ``anthropic-beta`` flags."""
    return [f.strip() for f in (headers.get(BETA) or "").split(",") if f.strip()]
