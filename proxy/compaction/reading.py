"""One request read (docs/architecture.md, "The path of one request"): its body parsed, the
policy chosen, and, when the proxy holds its history, its conversation built and planned with the
checkpoint that applies. Shared by the proxy's own compaction and native's path (``rewriter``).

Parsing, validation, planning and encoding are pure CPU: for a big body they run in a worker
thread (``offload``) so that other clients' requests are not held up; a small body is worked on
right here, without a detour through it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from operator import is_
from typing import Any, TypeVar

from proxy import tracing
from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation, Conversations
from proxy.compaction.decision import Incoming
from proxy.compaction.dialect.translation import Neutral, Translator
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.offload import OFFLOAD_BYTES, work
from proxy.compaction.planning import plan_with
from proxy.compaction.policies import choose_policy
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.core.checkpoints import Checkpoint, Record
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.core.resent import FOLLOW_BYTES, ParsedBody, unread_bytes
from proxy.core.tokens import TokenCounter
from proxy.errors import PayloadTooLarge
from proxy.state.conversations import Store
from proxy.state.tenancy import Tenancy, credential_from_headers, resolve_conversation_id
from proxy.types import ChatMessage, HeaderView

T = TypeVar("T")

# The last body of each conversation named by a header, kept so that its next body (the same
# history with turns appended, as most are) parses only what is new: bounded by conversations
# and by the bytes of their bodies (the parsed history they hold takes a few times as much).
LAST_BODIES = 64
LAST_BODY_BYTES = 32 << 20
# The last plan of each conversation, for its next request that sends the same history again:
# bounded by conversations and by the messages their histories hold.
LAST_PLANS = 64
LAST_PLAN_MESSAGES = 1 << 17


async def cpu(heavy: bool, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``: pure CPU work, in a worker thread for a heavy request (one past
    ``offload.OFFLOAD_BYTES``) so that other clients are not held up, else right here."""
    return await work(True, function, *args) if heavy else function(*args)


@dataclass(frozen=True)
class Asked:
    """One request as read: its body, and the policy that applies to it."""

    incoming: Incoming
    raw: bytes
    body: dict[str, Any]
    heavy: bool  # parsing, planning and encoding run in a worker thread
    model: str
    tenant: str
    policy_name: str
    policy: PolicySettings
    facts: FactLookup
    focus: str | None
    fell_back: bool = False  # native asked for where the provider offers none
    parsed: ParsedBody | None = None  # the body as parsed (what its history's items were made into)


@dataclass(frozen=True)
class Planned:
    """A request the proxy holds the history of, planned with the checkpoint that applies."""

    conv: Conversation
    checkpoint: Checkpoint | None
    current: Plan
    messages: list[ChatMessage]  # as the dialect read them
    pinned: str | None  # the checkpoint the request pins (read-only: no summary)


class LastBodies:
    """The last body parsed of each conversation named by a header, least recently used dropped
    first. Shared with worker threads: each change is made under a lock."""

    def __init__(self, *, max_bodies: int = LAST_BODIES, max_bytes: int = LAST_BODY_BYTES) -> None:
        self.max_bodies = max_bodies
        self.max_bytes = max_bytes
        self._bodies: OrderedDict[tuple[str, ...], ParsedBody] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> ParsedBody | None:
        with self._lock:
            parsed = self._bodies.get(key)
            if parsed is not None:
                self._bodies.move_to_end(key)
            return parsed

    def put(self, key: tuple[str, ...], parsed: ParsedBody) -> None:
        """Keep ``parsed`` as ``key``'s last body (dropped when it cannot be followed)."""
        with self._lock:
            old = self._bodies.pop(key, None)
            if old is not None:
                self._bytes -= len(old.raw)
            if not parsed.end or len(parsed.raw) > self.max_bytes:
                return
            self._bodies[key] = parsed
            self._bytes += len(parsed.raw)
            while len(self._bodies) > self.max_bodies or self._bytes > self.max_bytes:
                _, dropped = self._bodies.popitem(last=False)
                self._bytes -= len(dropped.raw)


@dataclass(frozen=True, slots=True)
class _Applied:
    """One conversation's last plan and everything it was made from."""

    messages: list[ChatMessage]
    record: Record | None
    policy: PolicySettings
    model: str
    model_info: ModelInfo | None
    tools: object
    checkpoint: Checkpoint | None
    plan: Plan


class LastPlans:
    """The last plan of each conversation (by its record key), given back to its next request
    when that plans the very same inputs again: the same message objects in the same order
    (identity: a followed body's messages are the last body's objects, never changed once
    parsed), the same record object (the store gives the decoded record back while its bytes
    stay the same, and a record is frozen), the same policy and model window objects (a new
    calibration factor or window is a new object), the same model and equal tools. The planner
    is a pure function of these and of each message's counts and digests, which depend on the
    message alone. Least recently used dropped first; each change under a lock (worker
    threads plan heavy requests)."""

    def __init__(
        self, *, max_plans: int = LAST_PLANS, max_messages: int = LAST_PLAN_MESSAGES
    ) -> None:
        self.max_plans = max_plans
        self.max_messages = max_messages
        self._plans: OrderedDict[str, _Applied] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, conv: Conversation, record: Record | None) -> _Applied | None:
        last = self._plans.get(conv.key)
        if (
            last is None
            or last.record is not record
            or last.policy is not conv.policy
            or last.model_info is not conv.model_info
            or last.model != conv.model
            or len(last.messages) != len(conv.messages)
            or not all(map(is_, conv.messages, last.messages))
            or (last.tools is not conv.tools and last.tools != conv.tools)
        ):
            return None
        with self._lock:
            if conv.key in self._plans:
                self._plans.move_to_end(conv.key)
        return last

    def put(
        self, conv: Conversation, record: Record | None, checkpoint: Checkpoint | None, plan: Plan
    ) -> None:
        messages = list(conv.messages)  # held: no other object takes one of their ids
        applied = _Applied(
            messages, record, conv.policy, conv.model, conv.model_info, conv.tools, checkpoint, plan
        )
        with self._lock:
            old = self._plans.pop(conv.key, None)
            self._held -= 0 if old is None else len(old.messages)
            if len(messages) > self.max_messages or self.max_plans <= 0:
                return
            self._plans[conv.key] = applied
            self._held += len(messages)
            while len(self._plans) > self.max_plans or self._held > self.max_messages:
                _, dropped = self._plans.popitem(last=False)
                self._held -= len(dropped.messages)


class Reader:
    """Reads and plans requests for the rewriter."""

    def __init__(
        self,
        settings: CompactionSettings,
        *,
        tenancy: Tenancy,
        counter: TokenCounter,
        conversations: Conversations,
        store: Store,
        stored: StoredCheckpoints,
        models: ModelInfos,
    ) -> None:
        self._settings = settings
        self._tenancy = tenancy
        self._counter = counter
        self._conversations = conversations
        self._store = store  # the conversation's record: one read
        self._stored = stored  # which of its checkpoints applies
        self._models = models
        self._last_bodies = LastBodies()
        self._last_plans = LastPlans()

    async def read(
        self, incoming: Incoming, raw: bytes, facts: FactLookup, focus: str | None
    ) -> Asked:
        """Parse the body (a 400 when it is invalid) and choose the policy."""
        headers = incoming.headers
        conversation = self._settings.conversation
        tenant = self._tenancy.tenant(credential_from_headers(headers.values, conversation))
        dialect = incoming.dialect
        # Followed only where it pays: a big body of a conversation a header names.
        named = _named_by(headers, conversation.header) if len(raw) >= FOLLOW_BYTES else None
        key = None if named is None else (tenant, dialect.name, named)
        last = None if key is None else self._last_bodies.get(key)
        # A big body goes to a worker thread, unless it follows the conversation's last one:
        # then only what is new is read, and planning carries the rest, which costs less than
        # the trips to the thread and back (four or five a request).
        heavy = len(raw) > OFFLOAD_BYTES and unread_bytes(raw, last) > OFFLOAD_BYTES
        parsed = await cpu(heavy, dialect.parse, raw, last, key is not None)
        if not heavy and not parsed.reused and len(raw) > OFFLOAD_BYTES:
            heavy = True  # it did not follow after all: the rest is worked on in full
        if key is not None:
            self._last_bodies.put(key, parsed)
        body = parsed.value
        model = body.get("model") or ""
        policy_name, policy = choose_policy(self._settings, headers, model=model, tenant=tenant)
        if tracing.on:
            tracing.request_model(model)
        return Asked(
            incoming,
            raw,
            body,
            heavy,
            model,
            tenant,
            policy_name,
            policy,
            facts,
            focus,
            parsed=parsed,
        )

    async def plan(self, asked: Asked) -> Planned | None:
        """The conversation planned with its checkpoint; None when the proxy does not hold its
        history (the provider does, e.g. ``previous_response_id``) or it names no conversation."""
        incoming, heavy, policy = asked.incoming, asked.heavy, asked.policy
        dialect = incoming.dialect
        neutral = await cpu(heavy, self._neutral_of, dialect, asked)
        if neutral is None:
            return None
        messages = neutral.messages
        conversation_id = resolve_conversation_id(
            incoming.headers.values,
            messages,
            tenant=asked.tenant,
            tenancy=self._tenancy,
            settings=self._settings.conversation,
        )
        if conversation_id is None:
            return None
        # The caller's key, where the route says it is valid (an Anthropic key never goes to
        # the OpenAI upstream's /models, nor to its summarizer).
        credentials = incoming.credentials
        self._models.windows.want(asked.model, credentials, policy)  # never waits
        build = partial(  # strips incoming summaries: a pass over every message
            self._conversations.build,
            asked.tenant,
            conversation_id,
            asked.body,
            neutral,
            asked.policy_name,
            policy,
            credentials=credentials,
            raw=asked.raw,
            heavy=heavy,
            dialect=dialect,
            facts=asked.facts,
        )
        conv = await cpu(heavy, build)
        if asked.focus is not None:
            conv = replace(conv, focus=asked.focus)
        record = await self._store.load(conv.tenant, conv.conversation_id)
        pinned = protocol.pinned_checkpoint(incoming.headers)
        checkpoint, current = await cpu(heavy, self._plan_applying, conv, record, pinned)
        return Planned(conv, checkpoint, current, messages, pinned)

    def _neutral_of(self, dialect: Translator, asked: Asked) -> Neutral | None:
        neutral = dialect.conversation(asked.body, facts=asked.facts, parsed=asked.parsed)
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
        the plan with it. Blocking: matching the history's hash chain is CPU work. The same
        history again with the same record is planned once (``LastPlans``)."""
        if pinned is None:
            last = self._last_plans.get(conv, record)
            if last is not None:
                return last.checkpoint, _of_request(last.plan, conv.messages)
        checkpoint = None  # nothing stored and nothing pinned (no summary yet): none applies
        if record is not None or pinned is not None:
            checkpoint = self._stored.to_apply(conv, record, pinned)
        if pinned is None:
            planned = plan_with(conv, checkpoint, counter=self._counter)
            self._last_plans.put(conv, record, checkpoint, planned)
            return checkpoint, planned
        if checkpoint is None or checkpoint.id != pinned:
            return checkpoint, plan_with(conv, checkpoint, counter=self._counter)
        pinned_plan = plan_with(conv, replace(checkpoint, strategy="pinned"), counter=self._counter)
        return checkpoint, replace(pinned_plan, summary_request=None)


def _of_request(plan: Plan, messages: list[ChatMessage]) -> Plan:
    """A plan made for the same message objects in another list, for this request: one that
    changes nothing sends this very list (so the client's own bytes go out); one that changes
    them is the same plan (what it is made of is read by position, never by the list's
    identity), so that what is derived from it can be kept by its identity (recall's notes)."""
    if plan.changed or plan.source is messages:
        return plan
    return replace(plan, source=messages, messages=messages)


def _named_by(headers: HeaderView, names: tuple[str, ...]) -> str | None:
    """The value of the first header that names the conversation (checked later, when the
    conversation is resolved: here it only says which last body to follow)."""
    for name in names:
        value = headers.get(name)
        if value:
            return value
    return None
