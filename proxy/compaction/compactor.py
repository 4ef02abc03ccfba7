"""Compaction in the request path: the Rewriter that puts planner, store and summarizer together,
for every dialect (docs/architecture.md, "The request path").

    parse (the dialect) -> neutral conversation -> policy -> load state (one store read) -> plan -> apply the deepest matching checkpoint
    -> summarize inline if it must -> forward -> after the response, maybe summarize ahead of time

Everything here fails open: a store or summarizer failure leaves the request as good as the best
state available (the previous checkpoint or the original messages), never a 5xx. Bad input is a
400 before anything is stored or forwarded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

from proxy import wirejson
from proxy.compaction.background import BackgroundQueue
from proxy.compaction.calibration import Calibration, effective_window, prompt_tokens
from proxy.compaction.decision import ClientRequest, Outgoing
from proxy.compaction.pinning import choose_checkpoint, pinned_id
from proxy.compaction.policies import POLICY_HEADER, SWITCH_HEADER, choose_policy
from proxy.compaction.summarizer import SummarizerFactory
from proxy.compaction.windows import ModelWindows
from proxy.config.settings import Settings
from proxy.core.checkpoints import Checkpoint, Record, find_deepest
from proxy.core.interactions import strip_agent_summaries
from proxy.core.planner import Plan, PriorSummary, SummaryRequest, plan
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.core.text import well_formed
from proxy.core.tokens import TokenCounter
from proxy.dialects.base import Dialect, Neutral
from proxy.dialects.chat_completions import CHAT
from proxy.errors import PayloadTooLarge, SummarizerError
from proxy.ops.hooks import Hooks
from proxy.ops.metrics import Metrics
from proxy.state.conversations import Store
from proxy.state.tenancy import (
    Credentials,
    Tenancy,
    credential_from_headers,
    resolve_conversation_id,
)
from proxy.types import RawHeaders

logger = logging.getLogger("proxy.compaction")
T = TypeVar("T")

# What an overflow retry aims for when the model's window is unknown: half of what failed.
_UNKNOWN_WINDOW_RETRY_FRACTION = 0.5
# Room left for the reply when a retry compacts to the model's window.
_RETRY_WINDOW_FRACTION = 0.85
_POLL_SECONDS = 0.1
# The strategy recorded on a checkpoint summarized ahead of time, before any trigger fired.
AHEAD = "summarize-ahead"

# Bodies larger than this are parsed, planned and encoded in a worker thread. Below it the work
# takes about a millisecond or two, less than handing it to a thread and back would cost.
OFFLOAD_BYTES = 1 << 20


async def _work(heavy: bool, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, in a worker thread when the request is heavy, else right here."""
    if heavy:
        return await asyncio.to_thread(function, *args)
    return function(*args)


def _header_map(raw_headers: RawHeaders) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}


def _body_of(request: ClientRequest) -> dict[str, Any]:
    return request.body


@dataclass(frozen=True)
class Conversation:
    """Who and what one request is about; enough to summarize it later, off the request path."""

    tenant: str
    conversation_id: str
    key: str  # single-flight key within this process
    policy_name: str
    policy: PolicySettings
    model: str
    model_info: ModelInfo | None
    credentials: Credentials | None  # the caller's, for a summarizer that uses the caller's key
    messages: list[dict[str, Any]]  # cleaned: what checkpoints index and hash
    body: dict[str, Any]
    raw: bytes
    heavy: bool = False  # big enough that CPU work runs off the event loop
    dialect: Dialect = CHAT  # parses the body, renders the plan back
    tools: object = None  # the tool schemas, counted as part of the prompt


def compaction_headers(
    outcome: str, plan_: Plan | None = None, *, policy: str | None = None
) -> list[tuple[bytes, bytes]]:
    headers = [(b"x-compaction", outcome.encode())]
    if plan_ is not None:
        headers += [
            (b"x-compaction-tokens-before", str(plan_.tokens_before).encode()),
            (b"x-compaction-tokens-after", str(plan_.tokens_after).encode()),
            (b"x-compaction-checkpoint", (plan_.applied_checkpoint or "").encode()),
        ]
    if policy is not None:
        headers.append((b"x-compaction-policy", policy.encode()))
    return headers


def _outcome(current: Plan, after: Callable[[], None] | None) -> str:
    """What X-Compaction says when nothing failed: ``skipped`` only when nothing was due."""
    if current.changed:
        return "applied"
    if not current.fired:
        return "skipped"
    # A trigger fired: either its summary is being made after this response (ahead mode, the
    # prompt still fits), or nothing can be cut (one message over the trigger, or a summary
    # that would not be smaller than what it replaces).
    return "pending" if after is not None else "blocked"


class Compactor:
    """Implements ``proxy.compaction.decision.Rewriter``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        counter: TokenCounter,
        summarizer_for: SummarizerFactory,
        background: BackgroundQueue,
        metrics: Metrics,
        windows: ModelWindows | None = None,
        calibration: Calibration | None = None,
        hooks: Hooks | None = None,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.tenancy = tenancy or store.tenancy  # the app's; a store built apart keys by its own
        self.counter = counter
        self.summarizer_for = summarizer_for
        self.background = background
        self.metrics = metrics
        self.windows = windows or ModelWindows(settings)
        self.calibration = calibration or Calibration(settings.calibration)
        self.hooks = hooks or Hooks(counter=counter)
        self._infos: dict[tuple[int, str], ModelInfo] = {}

    # --- the request path ---------------------------------------------------------------------

    def untouched(self, raw_headers: RawHeaders) -> RawHeaders | None:
        return self._decided_by_headers(_header_map(raw_headers))

    def _decided_by_headers(self, headers: dict[str, str]) -> RawHeaders | None:
        """The response headers of a request the headers alone send through untouched, or None.
        Such a request is never parsed: its bytes go out as they came (issue 9)."""
        if headers.get(SWITCH_HEADER, "").strip().lower() == "off":
            return self._off()
        conversation = self.settings.conversation
        if conversation.header.lower() not in headers and conversation.missing == "passthrough":
            return self._off()  # not ours to look into: byte-identical
        named = headers.get(POLICY_HEADER)
        if named in self.settings.policies and self.settings.policies[named].strategy == "off":
            return self._off(named)
        return None

    async def rewrite(self, request: ClientRequest) -> Outgoing:
        # Each message's key is computed once per request; later looks find it by identity.
        with self.counter.facts.request():
            return await self._rewrite(request)

    async def _rewrite(self, request: ClientRequest) -> Outgoing:
        headers = _header_map(request.headers)
        decided = self._decided_by_headers(headers)
        if decided is not None:
            return Outgoing(body=request.raw, response_headers=decided)
        conversation = self.settings.conversation
        credential = credential_from_headers(headers, conversation)
        tenant = self.tenancy.tenant(credential)
        # Parsing, validation, planning and encoding are pure CPU: for a big body they run in a
        # worker thread so that other clients' requests are not held up meanwhile (issue 9).
        heavy = len(request.raw) > OFFLOAD_BYTES
        body = await _work(heavy, _body_of, request)
        policy_name, policy = choose_policy(
            self.settings, headers, model=body.get("model") or "", tenant=tenant
        )
        if policy.strategy == "off":  # chosen by a route
            return self._untouched(request, policy_name)
        neutral = await _work(heavy, self._neutral_of, request.dialect, body)
        if neutral is None:  # the provider holds this history (e.g. previous_response_id)
            return self._untouched(request, policy_name)
        messages = neutral.messages
        conversation_id = resolve_conversation_id(
            headers, messages, tenant=tenant, tenancy=self.tenancy, settings=conversation
        )
        if conversation_id is None:
            return self._untouched(request, policy_name)
        # The caller's key goes only where the dialect says it is valid (an Anthropic key never
        # to the OpenAI upstream's /models, nor to its summarizer).
        credentials = request.credentials
        self.windows.want(body.get("model") or "", credentials, policy)  # never waits
        conv = await _work(  # strips incoming summaries: a pass over every message
            heavy,
            partial(
                self._conversation,
                tenant,
                conversation_id,
                body,
                neutral,
                policy_name,
                policy,
                credentials=credentials,
                raw=request.raw,
                heavy=heavy,
                dialect=request.dialect,
            ),
        )
        record = await self.store.load(tenant, conversation_id)
        current = await _work(heavy, self._plan_deepest, conv, record, pinned_id(headers))
        outcome = None
        wanted = current.summary_request
        if wanted is not None and current.fired and self._must_summarize_now(conv, current):
            try:
                made = await self._summarize_inline(conv, current, wanted)
                current = await _work(heavy, self._plan, conv, made)
            except SummarizerError as exc:
                logger.warning("inline summary failed, forwarding the best state: %s", exc.message)
                outcome = "failed"
            wanted = current.summary_request
        after = None
        if wanted is not None and current.near and policy.mode == "ahead":
            after = self._ahead_of_time(
                conv, wanted, current.applied_checkpoint, fired=bool(current.fired)
            )
        outcome = outcome or _outcome(current, after)
        current = await self.hooks.before_send(conv, current)
        return await _work(heavy, self._outgoing, conv, current, messages, outcome, after)

    def _neutral_of(self, dialect: Dialect, body: dict[str, Any]) -> Neutral | None:
        neutral = dialect.conversation(body)
        if neutral is None:
            return None
        messages = neutral.messages
        limit = self.settings.server.max_messages
        if len(messages) > limit:
            field = dialect.history_field  # counted in the core's messages
            raise PayloadTooLarge(
                f"'{field}' holds {len(messages)} messages; this proxy compacts at most {limit} "
                "(server.max_messages)",
                param=field,
                code="too_many_messages",
            )
        return neutral

    def _plan_deepest(
        self, conv: Conversation, record: Record | None, pinned: str | None = None
    ) -> Plan:
        """The plan with the checkpoint to apply: the deepest, or the one the request pins
        (``proxy.compaction.pinning``: applied even before a trigger fires, and read-only)."""
        ok = self.store.state().state == "ok"
        checkpoint = choose_checkpoint(
            record, conv.messages, pinned, store_ok=ok, facts=self.counter.facts
        )
        if pinned is None or checkpoint is None or checkpoint.id != pinned:
            return self._plan(conv, checkpoint)
        return replace(
            self._plan(conv, replace(checkpoint, strategy="pinned")), summary_request=None
        )

    def _conversation(
        self,
        tenant: str,
        conversation_id: str,
        body: dict[str, Any],
        neutral: Neutral,
        policy_name: str,
        policy: PolicySettings,
        *,
        credentials: Credentials | None,
        raw: bytes = b"",
        heavy: bool = False,
        dialect: Dialect = CHAT,
    ) -> Conversation:
        model = body.get("model") or ""
        return Conversation(
            tenant=tenant,
            conversation_id=conversation_id,
            key=self.tenancy.record_key(tenant, conversation_id),
            policy_name=policy_name,
            policy=self.calibration.policy(policy, model),
            model=model,
            model_info=self._model_info(model),
            credentials=credentials,
            messages=strip_agent_summaries(
                neutral.messages, final_prompt=policy.summarizer.final_prompt
            ),
            body=body,
            raw=raw,
            heavy=heavy,
            dialect=dialect,
            tools=neutral.tools,
        )

    def _model_info(self, model: str) -> ModelInfo | None:
        """The model's window (config, learned, discovered or built-in) in counted tokens: divided
        by the calibration factor, so every threshold measured against it is right."""
        window = self.windows.resolve(model)
        if window.context_window is None:
            return None
        tokens = effective_window(window.context_window, self.calibration.factor(model))
        key = (tokens, window.encoding)
        info = self._infos.get(key)
        if info is None:
            if len(self._infos) >= 4096:  # windows change slowly; bound them anyway
                self._infos.clear()
            info = self._infos[key] = ModelInfo(context_window=tokens, encoding=window.encoding)
        return info

    def _observer(self, conv: Conversation, sent: Plan) -> Callable[[int, RawHeaders, bytes], None]:
        """What the provider's answer teaches: a window (overflow), or a count's correction."""

        def observe(status: int, headers: RawHeaders, body: bytes) -> None:
            if status >= 400:
                self.windows.learn(conv.model, status, body)
            elif status == 200:
                self.calibration.observe(
                    conv.model, counted=sent.tokens_after, reported=prompt_tokens(body)
                )

        return observe

    # --- primitives for the admin API (proxy/ops/admin/routes.py) ---------------------------------------

    def conversation_of(
        self,
        tenant: str,
        conversation_id: str,
        body: dict[str, Any],
        *,
        policy_name: str,
        policy: PolicySettings,
        credentials: Credentials | None,
        dialect: Dialect,
    ) -> Conversation:
        """The conversation a posted body holds (messages validated); reads no state."""
        return self._conversation(
            tenant,
            conversation_id,
            body,
            dialect.conversation(body),
            policy_name,
            policy,
            credentials=credentials,
            dialect=dialect,
        )

    async def deepest_checkpoint(self, conv: Conversation) -> Checkpoint | None:
        """The stored checkpoint deepest in this history (one store read)."""
        return find_deepest(
            await self.store.load(conv.tenant, conv.conversation_id),
            conv.messages,
            facts=self.counter.facts,
        )

    def plan(
        self, conv: Conversation, checkpoint: Checkpoint | None, *, force: bool = False
    ) -> Plan:
        """What the conversation's policy sends with this checkpoint (``force``: a compaction
        as hard as the rules allow, as for an overflow retry)."""
        return self._plan(conv, checkpoint, force=force)

    async def summarize(
        self, conv: Conversation, current: Plan, wanted: SummaryRequest, *, mode: str
    ) -> Checkpoint:
        """Make and store the checkpoint ``wanted`` asks for, now (``mode`` labels the metrics).
        Raises SummarizerError."""
        return await self._summarize_inline(conv, current, wanted, mode=mode)

    def _untouched(self, request: ClientRequest, policy: str | None = None) -> Outgoing:
        return Outgoing(body=request.raw, response_headers=self._off(policy))

    def _off(self, policy: str | None = None) -> RawHeaders:
        self.metrics.child(self.metrics.compactions, "off", "off").inc()
        return compaction_headers("off", policy=policy)

    def _plan(
        self,
        conv: Conversation,
        checkpoint: Checkpoint | None,
        *,
        force: bool = False,
        budget: int = 0,
    ) -> Plan:
        prior = (
            PriorSummary(
                checkpoint.summary,
                checkpoint.covered,
                checkpoint.id,
                # Only a first summary made ahead of time waits for its trigger to fire.
                active=checkpoint.parent_id is not None or checkpoint.strategy != AHEAD,
            )
            if checkpoint is not None
            else None
        )
        return plan(
            conv.messages,
            conv.policy,
            model=conv.model,
            counter=self.counter,
            model_info=conv.model_info,
            prior=prior,
            tools=conv.tools,
            force=force,
            budget_tokens=budget,
        )

    def _must_summarize_now(self, conv: Conversation, current: Plan) -> bool:
        """inline mode: whenever a trigger fires; ahead mode: only when the request as it stands
        would not fit the model's window (otherwise it goes out now and is summarized after)."""
        if conv.policy.mode == "inline":
            return True
        window = conv.model_info.context_window if conv.model_info else None
        return window is not None and current.tokens_after > window

    def _outgoing(
        self,
        conv: Conversation,
        current: Plan,
        original: list[dict[str, Any]],
        outcome: str,
        after: Callable[[], None] | None = None,
        *,
        rescued: bool = False,
    ) -> Outgoing:
        self.metrics.child(self.metrics.compactions, conv.policy.strategy, outcome).inc()
        self.metrics.tokens_before.inc(current.tokens_before)
        self.metrics.tokens_after.inc(current.tokens_after)
        if current.messages is original:
            body = conv.raw  # nothing changed: the client's bytes go out
        else:
            # Deterministic encoding, so the same plan is the same bytes (provider prompt caches).
            body = wirejson.encode(conv.dialect.render(conv.body, current))
        headers = compaction_headers(outcome, current, policy=conv.policy_name)
        if rescued:
            headers.append((b"x-compaction-retried", b"context_length_exceeded"))
        return Outgoing(
            body=body,
            response_headers=headers,
            after=after,
            retry=None if rescued else lambda: self._rescue(conv, current, original),
            observe=self._observer(conv, current),
        )

    # --- summaries ----------------------------------------------------------------------------

    async def _summarize(
        self,
        conv: Conversation,
        wanted: SummaryRequest,
        parent_id: str | None,
        *,
        mode: str,
        triggered: bool = True,
    ) -> Checkpoint | None:
        """Make, store and return the checkpoint for ``wanted``; None if another caller (here or
        on another replica) holds the conversation's lock. Raises SummarizerError.

        ``triggered``: a trigger fired (rather than only being near), so the summary applies
        from the next request on; a summary made only because a trigger was near waits for it.
        """
        token = await self.store.acquire_lock(conv.tenant, conv.conversation_id)
        if token is None:
            return None
        try:
            # The plan may be stale (a background job, or a summary finished by someone else
            # meanwhile): extend the deepest stored checkpoint, never re-read what it covers.
            existing = await _work(
                conv.heavy,
                partial(
                    find_deepest,
                    await self.store.load(conv.tenant, conv.conversation_id),
                    conv.messages,
                    facts=self.counter.facts,
                ),
            )
            if existing is not None and existing.covered >= wanted.covered:
                return existing
            if existing is not None and existing.covered > wanted.start:
                wanted = SummaryRequest(
                    tuple(conv.messages[existing.covered : wanted.covered]),
                    existing.summary,
                    existing.covered,
                    wanted.covered,
                )
                parent_id = existing.id
            summarizer_settings = self.settings.summarizer.for_policy(
                conv.policy, request_model=conv.model
            )
            started = time.perf_counter()
            try:
                text = await asyncio.wait_for(
                    self.summarizer_for(conv.credentials, summarizer_settings).summarize(
                        wanted.messages,
                        previous=wanted.previous,
                        model=summarizer_settings.model,
                        max_tokens=summarizer_settings.max_summary_tokens,
                    ),
                    timeout=summarizer_settings.timeout_seconds,
                )
            except TimeoutError as exc:
                self.metrics.summarizer_calls.labels("timeout", mode).inc()
                raise SummarizerError("the summarizer timed out") from exc
            except SummarizerError:
                self.metrics.summarizer_calls.labels("error", mode).inc()
                raise
            self.metrics.summarizer_latency.observe(time.perf_counter() - started)
            self.metrics.summarizer_calls.labels("ok", mode).inc()
            summary_tokens = self.counter.count_text(text, summarizer_settings.model)
            # Counting and hashing a huge history is CPU work: off the event loop (issue 17).
            input_tokens = await _work(
                conv.heavy, self.counter.count_messages, list(wanted.messages), conv.model
            )
            self.metrics.summarizer_tokens.labels("input").inc(input_tokens)
            self.metrics.summarizer_tokens.labels("output").inc(summary_tokens)
            checkpoint = await _work(
                conv.heavy,
                partial(
                    Checkpoint.create,
                    conv.messages,
                    covered=wanted.covered,
                    summary=text,
                    parent_id=parent_id,
                    summary_tokens=summary_tokens,
                    # With $request the label is the client's model name: encodable text
                    # for the store, the admin API and the export sinks (issue 17).
                    model=well_formed(summarizer_settings.model),
                    strategy="summarize" if triggered else AHEAD,
                    dropped_messages=wanted.covered - wanted.start,
                    dropped_tokens=input_tokens,
                ),
            )
            await self.store.add_checkpoint(conv.tenant, conv.conversation_id, checkpoint)
            self.hooks.summary_made(conv, checkpoint)
            return checkpoint
        finally:
            await self.store.release_lock(conv.tenant, conv.conversation_id, token)

    async def _summarize_inline(
        self, conv: Conversation, current: Plan, wanted: SummaryRequest, *, mode: str = "inline"
    ) -> Checkpoint:
        """The checkpoint covering ``wanted``, made now or by whoever holds the lock; the caller
        plans again with it (the planner decides how it applies)."""
        deadline = time.monotonic() + self.settings.summarizer.timeout_seconds
        while True:
            checkpoint = await self._summarize(conv, wanted, current.applied_checkpoint, mode=mode)
            if checkpoint is not None:
                return checkpoint
            # Another caller (a background job here, or another replica) holds the lock. Its
            # summary may cover less than this request needs (an agent run grew meanwhile): once
            # it is stored and the lock is free, the next try extends it.
            if time.monotonic() >= deadline:
                raise SummarizerError("another summary of this conversation did not finish in time")
            await asyncio.sleep(_POLL_SECONDS)
            found = find_deepest(
                await self.store.load(conv.tenant, conv.conversation_id),
                conv.messages,
                facts=self.counter.facts,
            )
            if found is not None and found.covered >= wanted.covered:
                return found

    def _ahead_of_time(
        self, conv: Conversation, wanted: SummaryRequest, parent_id: str | None, *, fired: bool
    ) -> Callable[[], None]:
        """A callback, run once the response is sent, that queues the next summary."""

        async def job() -> None:
            try:
                await self._summarize(conv, wanted, parent_id, mode="ahead", triggered=fired)
            except SummarizerError as exc:
                logger.warning("background summary failed: %s", exc.message)

        def schedule() -> None:
            if not self.background.submit(conv.key, job) and not self.background.busy(conv.key):
                self.metrics.background_dropped.inc()

        return schedule

    # --- context overflow rescue --------------------------------------------------------------

    async def _rescue(
        self, conv: Conversation, sent: Plan, original: list[dict[str, Any]]
    ) -> Outgoing | None:
        """After the provider said the context was too long: compact as hard as the rules allow
        and return the request to retry once, or None when it cannot be made smaller."""
        conv = replace(conv, model_info=self._model_info(conv.model))  # a window just learned
        window = conv.model_info.context_window if conv.model_info else 0
        budget = int(window * _RETRY_WINDOW_FRACTION)
        if budget >= sent.tokens_after:  # unknown, or wrong: the provider refused less than it
            budget = int(sent.tokens_after * _UNKNOWN_WINDOW_RETRY_FRACTION)
        checkpoint = None
        if sent.applied_checkpoint is not None:
            record = await self.store.load(conv.tenant, conv.conversation_id)
            checkpoint = record.get(sent.applied_checkpoint) if record else None
        harder = await _work(
            conv.heavy, partial(self._plan, conv, checkpoint, force=True, budget=budget)
        )
        wanted = harder.summary_request
        outcome = "applied"
        if conv.policy.strategy == "summarize" and wanted is not None:
            try:
                made = await self._summarize_inline(conv, harder, wanted, mode="rescue")
                harder = await _work(
                    conv.heavy, partial(self._plan, conv, made, force=True, budget=budget)
                )
            except SummarizerError as exc:
                logger.warning("summary for the overflow retry failed: %s", exc.message)
                outcome = "failed"  # the budget still trims what it must
        if harder.tokens_after >= sent.tokens_after:
            self.metrics.overflow_retries.labels("not_smaller").inc()
            return None
        self.metrics.overflow_retries.labels("retried").inc()
        return await _work(
            conv.heavy, partial(self._outgoing, conv, harder, original, outcome, rescued=True)
        )
