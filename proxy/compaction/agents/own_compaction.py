"""When a coding agent compacts on its own (docs/agent-compaction.md): its summary request
answered from the conversation's ready summary, ``/v1/responses/compact`` answered where the
provider has none, and the compaction items the proxy handed out opened again before a provider
sees them.

This is a stage before the rewriter (``Compactor.decide``, on the routes it serves): a request
it does not recognise goes on to the rewriter unchanged, and so does every request the proxy
cannot be sure of. Recognising costs a byte search on the body the rewriter reads anyway; only
a match is parsed twice.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlsplit

from proxy import wirejson
from proxy.compaction import protocol
from proxy.compaction.agents.items import ItemSeal
from proxy.compaction.conversation import Conversation, Conversations
from proxy.compaction.decision import Decision, Incoming, LocalReply
from proxy.compaction.events import CompactionDecided
from proxy.compaction.offload import is_heavy, work
from proxy.compaction.policies import choose_policy, untouched
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.compaction.summaries.summarizer import SummarizerFactory
from proxy.compaction.summaries.transcript import transcript_line
from proxy.core.checkpoints import Checkpoint
from proxy.core.tokens import TokenCounter
from proxy.errors import SummarizerError
from proxy.events import Listeners
from proxy.state.tenancy import Tenancy, credential_from_headers, resolve_conversation_id
from proxy.types import HeaderView

logger = logging.getLogger("proxy.compaction")

# The uncovered tail a ready summary may leave and still answer an agent's summary request: its
# turns are then appended as a transcript (not summarized, not dropped). A longer tail means the
# summary is too old for what the agent asks: the request goes to the provider as it came.
MAX_TAIL_TOKENS = 4_000


# Where the upstream has its own /v1/responses/compact, the client's request goes there unchanged.
_OWN_COMPACT_HOSTS = frozenset({"api.openai.com"})


def answers_compact(upstream_base_url: str) -> bool:
    """Whether the proxy answers ``/v1/responses/compact`` itself: for every upstream but one
    known to have the endpoint (OpenAI's own API)."""
    return urlsplit(upstream_base_url).hostname not in _OWN_COMPACT_HOSTS


class AgentAsk(Protocol):
    """An agent's own summary request on one route (Claude Code's on ``/v1/messages``, Codex's
    compaction prompt on ``/v1/responses``)."""

    def might_be(self, raw: bytes) -> bool:
        """A cheap look at the raw body: False means it is surely not one."""
        ...

    def history(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The body as it would be without the agent's summary prompt (the history the agent
        asks to compact); None when it is not such a request or not one the proxy answers."""
        ...

    def reply(self, body: dict[str, Any], summary: str, *, reply_id: str) -> LocalReply:
        """The answer the agent expects, its text standing for ``summary``; ``reply_id`` is the
        part of its ids the proxy picks (each API puts its own prefix before it)."""
        ...


class CompactWire(Protocol):
    """``/v1/responses/compact`` and the compaction items, as the Responses dialect writes them."""

    def holds_items(self, raw: bytes) -> bool:
        """Whether the raw body may hold a compaction item the proxy issued."""
        ...

    def opened(self, body: dict[str, Any], seal: ItemSeal, tenant: str) -> dict[str, Any]:
        """``body`` with each of the proxy's compaction items replaced by the summary it holds
        (as a message the provider accepts)."""
        ...

    def reply(self, body: dict[str, Any], encrypted: str, *, reply_id: str) -> LocalReply:
        """The compact endpoint's answer: the input's user messages, then one compaction item
        holding ``encrypted``."""
        ...


@dataclass(frozen=True)
class AgentWires:
    """What the app wires in: the agents' asks by route label, and the compact endpoint."""

    asks: Mapping[str, AgentAsk]
    compact: CompactWire | None = None
    compact_route: str = "responses_compact"  # the label of the compact endpoint's route
    items_route: str = "responses"  # the route whose input may carry the proxy's items
    answer_compact: bool = True  # False: the upstream has the endpoint (OpenAI's own)


class AgentCompaction:
    """The stage before the rewriter; ``first`` answers a request or passes it on."""

    def __init__(
        self,
        settings: CompactionSettings,
        wires: AgentWires,
        *,
        tenancy: Tenancy,
        conversations: Conversations,
        stored: StoredCheckpoints,
        counter: TokenCounter,
        summarizer_for: SummarizerFactory,
        listeners: Listeners,
    ) -> None:
        self._settings = settings
        self._wires = wires
        self._tenancy = tenancy
        self._conversations = conversations
        self._stored = stored
        self._counter = counter
        self._summarizer_for = summarizer_for
        self._listeners = listeners
        self._seal = ItemSeal(tenancy)
        # The routes whose requests this stage may answer or change: no other enters it.
        compact = {wires.compact_route} if wires.compact is not None else set()
        items = {wires.items_route} if wires.compact is not None and wires.answer_compact else set()
        self.routes = frozenset({*wires.asks, *compact, *items})

    async def first(self, incoming: Incoming) -> tuple[Decision | None, Incoming]:
        """The decision when this stage answers the request (or forwards it untouched), else
        None and the request for the rewriter (its compaction items opened)."""
        route, wires = incoming.dialect.name, self._wires
        if route == wires.compact_route and wires.compact is not None:
            return await self._compact_endpoint(incoming, wires.compact), incoming
        if route == wires.items_route and wires.compact is not None and wires.answer_compact:
            incoming = await self._open_items(incoming, wires.compact)
        ask = wires.asks.get(route)
        if ask is None or untouched(self._settings, incoming.headers) is not None:
            return None, incoming
        raw = await incoming.body.read()
        if not ask.might_be(raw):
            return None, incoming
        return await self._answer_ask(incoming, ask, raw), incoming

    # --- an agent's summary request, answered from the ready summary ---------------------------

    async def _answer_ask(self, incoming: Incoming, ask: AgentAsk, raw: bytes) -> Decision | None:
        heavy = is_heavy(raw)  # an agent compacts a long history: CPU work off the event loop
        body = (await work(heavy, incoming.dialect.parse, raw)).value
        history = ask.history(body)
        if history is None:
            return None
        conv = await work(heavy, partial(self._conversation, incoming, history, heavy=heavy))
        if conv is None or conv.policy.strategy == "off":  # off by a route: left alone
            return None
        checkpoint = await self._stored.deepest(conv)
        text = await work(heavy, self._covering, conv, checkpoint)
        if text is None or checkpoint is None:
            return None  # no summary covers what the agent asks: the provider writes it
        before = await work(heavy, self._counter.count_messages, conv.messages, conv.model)
        self._listeners.emit(CompactionDecided(conv.policy.strategy, protocol.ANSWERED, before, 0))
        reply = ask.reply(body, text, reply_id=f"compaction_{checkpoint.id}")
        headers = protocol.answered_headers(before, checkpoint.id, conv.policy_name)
        return Decision(body=None, response_headers=headers, reply=reply)

    def _covering(self, conv: Conversation, checkpoint: Checkpoint | None) -> str | None:
        """The summary text standing for all of ``conv``: the checkpoint's, then the short
        uncovered tail as a transcript; None when there is none or the tail is too long."""
        if checkpoint is None:
            return None
        tail = conv.messages[checkpoint.covered :]
        if not tail:
            return checkpoint.summary
        if self._counter.count_messages(tail, conv.model) > MAX_TAIL_TOKENS:
            return None
        lines = "\n".join(transcript_line(m) for m in tail)
        return f"{checkpoint.summary}\n\nThe most recent turns, verbatim:\n{lines}"

    # --- /v1/responses/compact --------------------------------------------------------------

    async def _compact_endpoint(self, incoming: Incoming, wire: CompactWire) -> Decision:
        raw = await incoming.body.read()
        if not self._wires.answer_compact:  # the provider's own endpoint, as the client sent it
            return Decision(body=raw, response_headers=protocol.response_headers("off"))
        heavy = is_heavy(raw)
        body = (await work(heavy, incoming.dialect.parse, raw)).value
        tenant = self._tenant(incoming.headers)
        body = wire.opened(body, self._seal, tenant)
        conv = await work(
            heavy, partial(self._conversation, incoming, body, required=False, heavy=heavy)
        )
        if conv is None:  # no history in it: nothing to compact, the provider answers
            return Decision(body=raw, response_headers=protocol.response_headers("skipped"))
        checkpoint = await self._stored.deepest(conv) if conv.conversation_id else None
        before = await work(heavy, self._counter.count_messages, conv.messages, conv.model)
        try:
            summary, checkpoint_id = await self._summary_of(conv, checkpoint)
        except SummarizerError as exc:
            # Where the proxy cannot summarize, the provider may still answer (or refuse) it.
            logger.warning("the compact endpoint's summary failed, forwarding: %s", exc.message)
            return Decision(body=raw, response_headers=protocol.response_headers("failed"))
        self._listeners.emit(CompactionDecided(conv.policy.strategy, protocol.ANSWERED, before, 0))
        encrypted = self._seal.seal(tenant, summary)
        reply = wire.reply(body, encrypted, reply_id=f"compaction_{secrets.token_hex(12)}")
        headers = protocol.answered_headers(before, checkpoint_id, conv.policy_name)
        return Decision(body=None, response_headers=headers, reply=reply)

    async def _summary_of(
        self, conv: Conversation, checkpoint: Checkpoint | None
    ) -> tuple[str, str | None]:
        """The ready summary when it covers the input (``_covering``), else one the summarizer
        writes now (on top of the ready summary, reading only what it does not cover), and the
        checkpoint answered from. Raises SummarizerError."""
        ready = await work(conv.heavy, self._covering, conv, checkpoint)
        if ready is not None and checkpoint is not None:
            return ready, checkpoint.id
        start = checkpoint.covered if checkpoint is not None else 0
        turns = [m for m in conv.messages[start:] if m.get("role") != "system"]
        own = self._settings.summarizer.for_policy(conv.policy, request_model=conv.model)
        summarizer = self._summarizer_for(conv.credentials, own)
        previous = checkpoint.summary if checkpoint is not None else None
        written = summarizer.summarize(
            turns, previous=previous, model=own.model, max_tokens=own.max_summary_tokens
        )
        try:
            text = await asyncio.wait_for(written, timeout=own.timeout_seconds)
        except TimeoutError as exc:
            raise SummarizerError(
                "the summary took longer than summarizer.timeout_seconds"
            ) from exc
        return text, None

    async def _open_items(self, incoming: Incoming, wire: CompactWire) -> Incoming:
        """The request with the proxy's compaction items opened; as it came when it has none.
        Its body is read even when compaction leaves it alone: the provider must never see an
        item of ours, which it could not read."""
        raw = await incoming.body.read()
        if not wire.holds_items(raw):
            return incoming
        heavy = is_heavy(raw)
        body = (await work(heavy, incoming.dialect.parse, raw)).value
        opened = wire.opened(body, self._seal, self._tenant(incoming.headers))
        encoded = await work(heavy, wirejson.encode, opened)
        return replace(incoming, body=_Ready(encoded), streamable=False)

    # --- shared ---------------------------------------------------------------------------------

    def _tenant(self, headers: HeaderView) -> str:
        credential = credential_from_headers(headers.values, self._settings.conversation)
        return self._tenancy.tenant(credential)

    def _conversation(
        self, incoming: Incoming, body: dict[str, Any], *, required: bool = True, heavy: bool
    ) -> Conversation | None:
        """The conversation ``body`` holds; None when it holds none, or (``required``) when
        the request names no conversation the store could hold a summary of. Blocking: it
        walks every message."""
        headers = incoming.headers
        neutral = incoming.dialect.conversation(body)
        if neutral is None:
            return None
        tenant = self._tenant(headers)
        policy_name, policy = choose_policy(
            self._settings, headers, model=body.get("model") or "", tenant=tenant
        )
        conversation_id = None
        if untouched(self._settings, headers) is None:
            conversation_id = resolve_conversation_id(
                headers.values,
                neutral.messages,
                tenant=tenant,
                tenancy=self._tenancy,
                settings=self._settings.conversation,
            )
        if conversation_id is None and required:
            return None
        return self._conversations.build(
            tenant,
            conversation_id or "",
            body,
            neutral,
            policy_name,
            policy,
            credentials=incoming.credentials,
            heavy=heavy,
            dialect=incoming.dialect,
        )


@dataclass(frozen=True)
class _Ready:
    """A body already in hand (``proxy.compaction.decision.BodySource``)."""

    raw: bytes

    async def read(self) -> bytes:
        return self.raw
