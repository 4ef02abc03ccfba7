"""The recall tool, compaction's side (docs/recall.md): which requests get it, the
originals their plan refers to (kept in the store, fire-and-forget), and the answer to one call.

``Recall.prepare`` annotates a plan (``notes``) and, when the plan refers to originals and the
request may have the tool, returns a ``RecallSession`` the decision carries to the forwarder,
whose loop (``proxy/proxying/recall/loop.py``) answers the model's calls with it."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from proxy import wirejson
from proxy.compaction.conversation import Conversation
from proxy.compaction.dialect.recall import RecallShape, ToolCall
from proxy.compaction.money.pending import PendingWrites
from proxy.compaction.money.spending import Spending, read_usage
from proxy.compaction.offload import work
from proxy.compaction.recall.answer import quoted
from proxy.compaction.recall.covered import CoveredPieces, Piece
from proxy.compaction.recall.events import (
    OriginalsKept,
    RecallAnswered,
    RecallOffered,
    RecallRounds,
)
from proxy.compaction.recall.notes import Notes, annotate
from proxy.compaction.recall.stubs import StubHistories
from proxy.config.recall import RecallSettings
from proxy.core.plan import Plan
from proxy.core.tokens import TokenCounter
from proxy.economics.usage import BilledUsage
from proxy.events import Listeners
from proxy.state.originals import UNAVAILABLE, Originals
from proxy.state.tenancy import Tenancy
from proxy.types import RawHeaders

_KNOWN_NOTES = 64  # conversations whose last notes are kept
_KNOWN_KEPT = 4096  # (conversation, handle) pairs this process knows are stored already
# One round's results together, in recall.max_result_bytes: a model that calls recall hundreds
# of times in one answer must not make a re-ask of megabytes (each call is capped already).
_ROUND_RESULTS = 4


class Recall:
    """Built once by the compactor."""

    def __init__(
        self,
        settings: RecallSettings,
        *,
        originals: Originals,
        tenancy: Tenancy,
        listeners: Listeners,
        counter: TokenCounter,
        spending: Spending | None = None,
    ) -> None:
        self.settings = settings
        self._counter = counter
        self._originals = originals
        self._tenancy = tenancy
        self._listeners = listeners
        self._spending = spending
        self._writes = PendingWrites("originals write")
        self._kept: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Each conversation's last pieces found all kept, and ``_forgotten`` then: the same
        # pieces again are kept still unless a handle was forgotten since.
        self._looked: dict[str, tuple[dict[str, Piece], int]] = {}
        self._forgotten = 0  # handles taken out of ``_kept``
        self._covered = CoveredPieces()  # each turn until the next summary covers the same
        self._stubs = StubHistories()  # each turn until the next summary clears the same
        self._tools: dict[tuple[RecallShape, str], int] = {}  # the tool's tokens, by encoding
        # Whether a dialect's shape offers the tool at all (to a body of nothing): a constant.
        self._offers: dict[tuple[RecallShape, str, str], bool] = {}
        # Each conversation's last notes and what they were made of: a plan taken again
        # (``proxy.compaction.reading.LastPlans``) is annotated once.
        self._notes: dict[tuple[str, str, str], tuple[Plan, RecallSettings, Notes]] = {}

    async def prepare(self, conv: Conversation, plan: Plan) -> tuple[Plan, RecallSession | None]:
        """The plan to render (stubs naming handles, the summary's index) and the session of a
        request that gets the tool; (``plan``, None) when recall does not apply: then nothing
        names a handle (a client tool of the same name must not be called with one).

        Every request whose plan sends stubs or a summary gets the tool (unless it would make
        the prompt bigger than the client's own), the same bytes each time: it is rendered with the client's tools, before the messages, so a tool that came
        and went between requests would make the provider bill the whole prompt again each
        time (the price trigger counts that break once, when a compaction brings the tool in:
        ``proxy.compaction.money.paying``). What may be left out is the notes: the index first, then
        the handles, when they would make the prompt bigger than the client's own or past a
        budget the plan kept."""
        shape = self.shape_for(conv)
        if shape is None or not (plan.cleared or plan.summary_text):
            return plan, None
        salt = self._tenancy.recall_salt(conv.tenant, conv.conversation_id)
        encoding = self._counter.encoding_name(conv.model)
        tool = self._tool_tokens(conv, shape)  # sent too
        # Left out when it would make the prompt bigger than the client's own (a compaction that
        # saves less than the tool: a saving that grows with the conversation, so the tool does
        # not come and go) or past a hard limit: the model's window, the policy's window_tokens.
        # Never for a trigger (input_tokens, context_fraction): a prompt grows towards it turn by
        # turn and would lose the tool on the way; the tool may pass it by its own size.
        with_tool = plan.tokens_after + tool
        if with_tool >= plan.tokens_before or with_tool > _hard_limit(conv, plan):
            return plan, None
        ceiling = _ceiling(conv, plan)
        pieces: dict[str, Piece] = {}
        sent = plan
        # The full index first, then none, then no notes: recall's notes never make the prompt
        # bigger than the client's own nor push it past a budget the plan kept (docs/recall.md).
        for settings in self._passes():
            notes = await self._annotated(conv, plan, salt, settings, encoding)
            if not notes.pieces:
                break
            if notes.plan.tokens_after + tool <= ceiling:
                pieces, sent = notes.pieces, notes.plan
                break
        if pieces:
            self._keep(conv, pieces)
            self._listeners.emit(RecallOffered(len(pieces)))
        sent = sent.sending(sent.messages, sent.tokens_after + tool)
        return sent, RecallSession(self, conv, shape, pieces, plan=sent)

    async def _annotated(
        self, conv: Conversation, plan: Plan, salt: str, settings: RecallSettings, encoding: str
    ) -> Notes:
        """``annotate``'s notes, or the last ones made of the very same plan and settings."""
        key = (conv.key, salt, encoding)
        last = self._notes.get(key)
        if last is not None and last[0] is plan and last[1] is settings:
            return last[2]
        # A pass over the messages, hashing what was removed: off the loop for a big body.
        count = partial(self._counter.count_encoded_again, encoding=encoding)
        notes = await work(
            conv.heavy,
            partial(
                annotate,
                plan,
                salt=salt,
                settings=settings,
                count=count,
                covered_pieces=self._covered,
                facts=conv.facts,
                stubs=self._stubs,
            ),
        )
        if len(self._notes) >= _KNOWN_NOTES:
            self._notes.clear()
        self._notes[key] = (plan, settings, notes)
        return notes

    def _passes(self) -> Iterator[RecallSettings]:
        """The settings with the full index, then with none (copied only when it comes to it:
        most requests' notes fit with the index)."""
        yield self.settings
        yield self.settings.model_copy(update={"index_entries": 0})

    def tool_tokens(self, conv: Conversation) -> int | None:
        """The tokens of the tool this request gets once its plan sends stubs or a summary;
        None when it gets none (``shape_for``)."""
        shape = self.shape_for(conv)
        return None if shape is None else self._tool_tokens(conv, shape)

    def _tool_tokens(self, conv: Conversation, shape: RecallShape) -> int:
        """Counted once per dialect and encoding: the tool is the same bytes every time."""
        key = (shape, self._counter.encoding_name(conv.model))
        tokens = self._tools.get(key)
        if tokens is None:
            offered = shape.offer({}, self.settings.tool_name, self.settings.description) or {}
            tokens = self._tools[key] = self._counter.count_tools(offered.get("tools"), conv.model)
        return tokens

    def shape_for(self, conv: Conversation) -> RecallShape | None:
        """The dialect's recall shape when this request may be given the tool once its plan
        sends stubs or a summary: recall on, a dialect that has it, no client tool of its name,
        a ``tool_choice`` that allows tools."""
        shape: RecallShape | None = conv.dialect.recall if conv.dialect is not None else None
        if not self.settings.enabled or shape is None:
            return None
        name, description = self.settings.tool_name, self.settings.description
        offers = self._offers.get((shape, name, description))
        if offers is None:
            offers = shape.offer({}, name, description) is not None
            self._offers[(shape, name, description)] = offers
        if not offers or shape.offer(conv.body, name, description) is None:
            return None  # the client's own tool of that name, or no tools allowed
        return shape

    def _keep(self, conv: Conversation, pieces: dict[str, Piece]) -> None:
        """Store the pieces this process has not stored yet, after the answer (never waited).
        The same pieces object again (a summary's, sent each turn until the next) is looked
        through once, until a handle is forgotten."""
        scope = conv.key
        last = self._looked.get(scope)
        if last is not None and last[0] is pieces and last[1] == self._forgotten:
            return
        new = [(h, p.text) for h, p in pieces.items() if (scope, h) not in self._kept]
        if len(self._looked) >= _KNOWN_NOTES:
            self._looked.clear()
        self._looked[scope] = (pieces, self._forgotten)
        if not new:
            return
        for handle, _ in new:
            self._kept[(scope, handle)] = None
        while len(self._kept) > _KNOWN_KEPT:
            self._kept.popitem(last=False)
            self._forgotten += 1

        async def write() -> None:
            kept = await self._originals.keep(
                conv.tenant, conv.conversation_id, new, budget_bytes=self.settings.budget_bytes
            )
            if kept is None:  # not written: try again on a later request
                self._forgotten += 1
                for handle, _ in new:
                    self._kept.pop((scope, handle), None)
            elif kept.added or kept.evicted:
                self._listeners.emit(OriginalsKept(kept.added, kept.evicted))

        self._writes.start(write)

    async def join(self) -> None:
        await self._writes.join()


@dataclass
class RecallSession:
    """One request's recall: the tool's shape, what its plan refers to, the calls answered."""

    recall: Recall
    conv: Conversation
    shape: RecallShape
    pieces: dict[str, Piece]
    plan: Plan
    _round_usages: list[BilledUsage] = field(default_factory=list)
    _rounds: int = 0

    @property
    def settings(self) -> RecallSettings:
        return self.recall.settings

    @property
    def tool_name(self) -> str:
        return self.settings.tool_name

    def with_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        """The rendered body with the tool added (``prepare`` checked that it may be)."""
        return self.shape.offer(body, self.tool_name, self.settings.description) or body

    async def answer(self, call: ToolCall) -> str:
        """The tool result for one recall call: the original (or its matching lines), or a
        sentence saying why there is none. Never raises."""
        try:
            # Bounded before it is parsed: a model may write arguments nested a thousand deep.
            args = wirejson.loads_shallow(call.arguments or "{}")
        except ValueError:
            args = None
        handle = args.get("id") if isinstance(args, dict) else None
        if not isinstance(handle, str) or not handle.strip():
            self._count("missing")
            return (
                'No recall id given: call it with {"id": "r..."} as named in a stub or the index.'
            )
        handle = handle.strip()
        piece = self.pieces.get(handle)
        text: object = piece.text if piece is not None else None
        if text is None:
            c = self.conv
            text = await self.recall._originals.find(c.tenant, c.conversation_id, handle)
        if text is UNAVAILABLE:
            self._count("unavailable")
            return f"The original of {handle} is unavailable right now; go on without it."
        if not isinstance(text, str):
            self._count("missing")
            return f"Not found: no original with recall id {handle} in this conversation (unknown or expired)."
        self._count("found")
        query = args.get("query") if isinstance(args, dict) else None
        query = query.strip() if isinstance(query, str) and query.strip() else None
        return quoted(handle, text, query=query, max_bytes=self.settings.max_result_bytes)

    def _count(self, outcome: str) -> None:
        self.recall._listeners.emit(RecallAnswered(outcome))

    def round_tokens(self, round_tails: list[bytes]) -> int:
        """The tokens the rounds were billed (prompt and completion), from their answers."""
        usages = (read_usage(self.conv.route, tail) for tail in round_tails)
        return sum(u.prompt + u.output for u in usages if u is not None)

    def finished(self, round_tails: list[bytes]) -> None:
        """The rounds are over (one answer each in ``round_tails``): tell the metrics. Their
        pricing waits for the final answer (``after_rounds``)."""
        self._round_usages = [
            u for u in (read_usage(self.conv.route, tail) for tail in round_tails) if u is not None
        ]
        if round_tails:
            tokens = sum(u.prompt + u.output for u in self._round_usages)
            self.recall._listeners.emit(RecallRounds(len(round_tails), tokens))
            self._rounds = len(round_tails)

    async def answer_round(self, calls: list[ToolCall]) -> dict[str, str]:
        """The tool results of one round's calls, by call id: each as ``answer`` gives it until
        their total reaches ``_ROUND_RESULTS`` times ``recall.max_result_bytes``; every later
        call gets a sentence instead (a provider wants a result for each call)."""
        budget = _ROUND_RESULTS * self.settings.max_result_bytes
        results: dict[str, str] = {}
        for call in calls:
            if budget <= 0:
                results[call.id] = (
                    "Not recalled: this round's recalls are already as long as one round may "
                    "be. Recall fewer at a time, or with a query."
                )
                continue
            text = await self.answer(call)
            results[call.id] = text
            budget -= len(text.encode("utf-8", "surrogatepass"))
        return results

    def _price(self, usage: BilledUsage) -> None:
        if self.recall._spending is not None:
            self.recall._spending.answered(self.conv, self.plan, usage)

    def after_rounds(self, inner: _FollowUp | None, *, summed: Callable[[], bool]) -> _AfterRounds:
        """The follow-up of an answer that came after recall rounds (or may, a stream whose
        rounds run while it is relayed): it prices the answer, and the rounds too unless
        ``summed()`` says the answer's usage holds them, and learns nothing from it (its
        prompt is not the one planned: no calibration sample). An answer that took no round
        after all is the inner follow-up's."""
        return _AfterRounds(self, inner, summed)


class _FollowUp(Protocol):
    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None: ...

    def answered(self) -> None: ...


class _AfterRounds:
    """A ``proxy.compaction.decision.FollowUp`` (not imported: the decision names this module)."""

    def __init__(
        self, session: RecallSession, inner: _FollowUp | None, summed: Callable[[], bool]
    ) -> None:
        self._session = session
        self._inner = inner
        self._summed = summed

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        if not self._session._rounds:
            if self._inner is not None:
                self._inner.observe(status, headers, tail)
            return
        usage = read_usage(self._session.conv.route, tail) if status == 200 else None
        if usage is not None:
            self._session._price(usage)
        if usage is None or not self._summed():  # the rounds were billed all the same
            for round_usage in self._session._round_usages:
                self._session._price(round_usage)

    async def replacement(self) -> None:
        return None

    def answered(self) -> None:
        if self._inner is not None:
            self._inner.answered()


def _hard_limit(conv: Conversation, plan: Plan) -> float:
    """The most tokens a prompt may have whatever it carries: the model's known window, and the
    policy's window_tokens when the plan kept within it."""
    window = conv.model_info.context_window if conv.model_info else None
    budget = conv.policy.window_tokens
    limits = [w for w in (window, budget) if w and plan.tokens_after <= w]
    return min(limits, default=math.inf)


def _ceiling(conv: Conversation, plan: Plan) -> int:
    """The most tokens a prompt with recall may have: less than the client's own prompt, and
    within each budget the plan itself keeps (the input_tokens trigger, window_tokens, the
    context_fraction of a known window)."""
    policy = conv.policy
    window = conv.model_info.context_window if conv.model_info else None
    budgets = [policy.trigger.input_tokens, policy.window_tokens]
    if window and policy.trigger.context_fraction:
        budgets.append(int(window * policy.trigger.context_fraction))
    kept = [b for b in budgets if b > 0 and plan.tokens_after <= b]
    return min([plan.tokens_before - 1, *kept])
