"""Compaction as the app builds it and the route and the admin API use it.

``Compactor`` puts the parts together (docs/architecture.md, "The request path"): the
``Rewriter`` decides each request (``decide``: the one call the route makes), ``Summaries``
makes summaries one at a time, ``AheadOfTime`` queues those due after an answer,
``OverflowRescue`` plans the retry after an overflow, ``StoredCheckpoints`` reads what the store
holds, ``Spending`` writes each conversation's books after its answers. Each part is made by one
named builder over ``_Parts``, what they are built from and share. The app sees ``decide`` and
``join`` (the writes the last answers left, at shutdown); the admin API's preview and forced
compaction use the same parts (``conversation_of``, ``deepest_checkpoint``, ``plan``,
``summarize``, ``forget``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from proxy.compaction.agents.own_compaction import AgentCompaction, AgentWires
from proxy.compaction.conversation import Conversation, Conversations
from proxy.compaction.decision import Decision, Incoming
from proxy.compaction.dialect.translation import Translator
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.models.windows import ModelWindows
from proxy.compaction.money.pace import Paces
from proxy.compaction.money.paying import PriceTrigger
from proxy.compaction.money.spending import Spending
from proxy.compaction.planning import plan_with
from proxy.compaction.reading import Reader
from proxy.compaction.recall.tool import Recall
from proxy.compaction.rescue import OverflowRescue
from proxy.compaction.review import PlanReview
from proxy.compaction.rewriter import Rewriter
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.ahead import AheadOfTime
from proxy.compaction.summaries.background import BackgroundQueue
from proxy.compaction.summaries.making import Summaries
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.compaction.summaries.summarizer import SummarizerFactory
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan import Plan, SummaryRequest
from proxy.core.policy import PolicySettings
from proxy.core.tokens import TokenCounter
from proxy.economics.prices import PriceTable
from proxy.errors import InvalidRequest
from proxy.events import Listeners
from proxy.state.conversations import Store
from proxy.state.tenancy import Credentials, Tenancy


class Compactor:
    """The compaction of a proxy: built once by the app from its parts and settings."""

    def __init__(
        self,
        settings: CompactionSettings,
        *,
        store: Store,
        counter: TokenCounter,
        summarizer_for: SummarizerFactory,
        background: BackgroundQueue,
        windows: ModelWindows,
        calibration: Calibration,
        listeners: Listeners | None = None,
        review: PlanReview | None = None,
        tenancy: Tenancy | None = None,
        prices: PriceTable | None = None,
        clock: Callable[[], float] = time.time,
        agents: AgentWires | None = None,
    ) -> None:
        self.settings = settings
        self.counter = counter
        self._store = store
        parts = _Parts.of(
            settings,
            store=store,
            counter=counter,
            summarizer_for=summarizer_for,
            calibration=calibration,
            models=ModelInfos(windows, calibration),
            listeners=listeners or Listeners(),
            tenancy=tenancy or store.tenancy,  # the app's; a store built apart keys by its own
            prices=prices or PriceTable(),
            clock=clock,
        )
        self._conversations, self._stored = parts.conversations, parts.stored
        self._spending = parts.spending
        self._paces = parts.paces
        self._summaries = _summaries(parts)
        self._recall = _recall(parts)
        self._rewriter = _rewriter(
            parts, self._summaries, self._recall, background=background, review=review
        )
        self._agents = None if agents is None else _agents(parts, agents)

    # --- the request path ---------------------------------------------------------------------

    async def decide(self, incoming: Incoming) -> Decision:
        """What to send for one request, and what to do after its answer (the route's one
        call). Raises ProxyError (a 4xx) for a request no provider should see."""
        if self._agents is not None and incoming.dialect.name in self._agents.routes:
            answered, incoming = await self._agents.first(incoming)
            if answered is not None:
                return answered
        return await self._rewriter.decide(incoming)

    def decide_for(self, route: str) -> Callable[[Incoming], Awaitable[Decision]]:
        """What the route labelled ``route`` calls for each of its requests: ``decide``, or the
        rewriter's own when no agent's compaction is served on that route (known when the
        routes are built, so their requests take no detour through here)."""
        if self._agents is not None and route in self._agents.routes:
            return self.decide
        return self._rewriter.decide

    async def join(self) -> None:
        """Wait for the writes the answered requests left under way: their books (ledger,
        pace, timeline) and the originals recall keeps (shutdown and tests)."""
        await self._spending.join()
        await self._recall.join()

    # --- primitives for the admin API (proxy/ops/admin/routes.py) -----------------------------

    def conversation_of(
        self,
        tenant: str,
        conversation_id: str,
        body: dict[str, Any],
        *,
        policy_name: str,
        policy: PolicySettings,
        credentials: Credentials | None,
        dialect: Translator,
    ) -> Conversation:
        """The conversation a posted body of ``dialect`` holds (its history validated as the
        dialect does); reads no state."""
        neutral = dialect.conversation(body)
        if neutral is None:  # the provider holds this history: nothing here to compact
            raise InvalidRequest(
                f"'{dialect.history_field}' holds no history the proxy can compact",
                param=dialect.history_field,
            )
        return self._conversations.build(
            tenant, conversation_id, body, neutral, policy_name, policy, credentials=credentials
        )

    async def deepest_checkpoint(self, conv: Conversation) -> Checkpoint | None:
        """The stored checkpoint deepest in this history (one store read)."""
        return await self._stored.deepest(conv)

    async def forget(self, tenant: str, conversation_id: str) -> bool:
        """Delete the conversation from the store (True if it was stored), counting the
        summaries it held that no request applied. StoreError when that cannot be done."""
        delete = partial(self._store.delete, tenant, conversation_id)
        return await self._paces.forgetting(tenant, conversation_id, delete)

    def plan(
        self, conv: Conversation, checkpoint: Checkpoint | None, *, force: bool = False
    ) -> Plan:
        """What the conversation's policy sends with this checkpoint (``force``: a compaction
        as hard as the rules allow, as for an overflow retry)."""
        return plan_with(conv, checkpoint, counter=self.counter, force=force)

    async def summarize(
        self, conv: Conversation, current: Plan, wanted: SummaryRequest, *, mode: str
    ) -> Checkpoint:
        """Make and store the checkpoint ``wanted`` asks for, now, waiting for a summary in
        progress elsewhere (``mode`` labels the metrics: ``admin``). Raises SummarizerError."""
        return await self._summaries.summarize_now(
            conv, wanted, current.applied_checkpoint, mode=mode
        )


@dataclass(frozen=True, slots=True)
class _Parts:
    """What the parts of compaction are built from, and the parts several of them share."""

    settings: CompactionSettings
    store: Store
    tenancy: Tenancy
    counter: TokenCounter
    listeners: Listeners
    summarizer_for: SummarizerFactory
    models: ModelInfos
    prices: PriceTable
    conversations: Conversations
    stored: StoredCheckpoints
    spending: Spending  # each answer and summary priced into the conversation's books
    paces: Paces  # each conversation's growth and the summaries not applied yet

    @classmethod
    def of(
        cls,
        settings: CompactionSettings,
        *,
        store: Store,
        counter: TokenCounter,
        summarizer_for: SummarizerFactory,
        calibration: Calibration,
        models: ModelInfos,
        listeners: Listeners,
        tenancy: Tenancy,
        prices: PriceTable,
        clock: Callable[[], float],
    ) -> _Parts:
        conversations = Conversations(
            tenancy=tenancy, calibration=calibration, models=models, facts=counter.facts
        )
        return cls(
            settings,
            store,
            tenancy,
            counter,
            listeners,
            summarizer_for,
            models,
            prices,
            conversations,
            StoredCheckpoints(store),
            Spending(prices=prices, ledgers=store.ledgers, listeners=listeners, clock=clock),
            Paces(store.ledgers, listeners, clock=clock),
        )


def _summaries(parts: _Parts) -> Summaries:
    """Summaries made one at a time per conversation, priced and paced."""
    return Summaries(
        store=parts.store,
        stored=parts.stored,
        counter=parts.counter,
        summarizer_for=parts.summarizer_for,
        settings=parts.settings.summarizer,
        listeners=parts.listeners,
        spending=parts.spending,
        paces=parts.paces,
    )


def _recall(parts: _Parts) -> Recall:
    """What compaction removed, kept for the model's recall tool."""
    return Recall(
        parts.settings.recall,
        originals=parts.store.originals,
        tenancy=parts.tenancy,
        listeners=parts.listeners,
        counter=parts.counter,
        spending=parts.spending,
    )


def _rewriter(
    parts: _Parts,
    summaries: Summaries,
    recall: Recall,
    *,
    background: BackgroundQueue,
    review: PlanReview | None,
) -> Rewriter:
    """The decision of one request, with what it may do after the answer (a summary ahead of
    time, the rescue of an overflow)."""
    return Rewriter(
        parts.settings,
        reader=Reader(
            parts.settings,
            tenancy=parts.tenancy,
            counter=parts.counter,
            conversations=parts.conversations,
            store=parts.store,
            stored=parts.stored,
            models=parts.models,
        ),
        counter=parts.counter,
        summaries=summaries,
        ahead=AheadOfTime(background=background, summaries=summaries, listeners=parts.listeners),
        rescue=OverflowRescue(
            stored=parts.stored,
            summaries=summaries,
            models=parts.models,
            counter=parts.counter,
            listeners=parts.listeners,
        ),
        models=parts.models,
        review=review,
        listeners=parts.listeners,
        spending=parts.spending,
        paces=parts.paces,
        price=PriceTrigger(parts.settings, parts.prices, parts.counter, recall),
        prices=parts.prices,
        recall=recall,
    )


def _agents(parts: _Parts, agents: AgentWires) -> AgentCompaction:
    """The agents' own compaction (docs/agent-compaction.md): a stage before the rewriter."""
    return AgentCompaction(
        parts.settings,
        agents,
        tenancy=parts.tenancy,
        conversations=parts.conversations,
        stored=parts.stored,
        counter=parts.counter,
        summarizer_for=parts.summarizer_for,
        listeners=parts.listeners,
    )
