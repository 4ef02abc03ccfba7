"""A plan: the exact messages to send for one request, what was measured on the way, and what a
new summary must cover; rendered again once that summary exists (``Plan.with_summary``).

The planner (``proxy.core.planner``) makes plans; dialects render them, the request path sends
them. ``assemble`` puts the sent list together: head, the task message sent again, the verbatim
part, then the hard budget (``cut_deeper``). Pure and synchronous.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from typing import TypedDict

from proxy.core.interactions import Grouping, Summed
from proxy.core.policy import PolicySettings
from proxy.core.summary_message import render_summary_message
from proxy.core.tokens import TokenCounter
from proxy.types import ChatMessage


@dataclass(frozen=True, slots=True)
class PriorSummary:
    """A checkpoint the store matched: ``text`` stands for messages[preamble_len:covered] of the
    cleaned incoming list; messages[:covered] is what its hash chain covers."""

    text: str
    covered: int
    checkpoint_id: str | None = None
    # Active: the conversation is already in its compacted state (this summary was made because
    # a trigger fired, or it extends one that was), so it applies whether or not a trigger fires
    # on this request. Without it, a trigger that fires on one request only (a tool outcome)
    # would switch the summary on and off between requests, defeating the provider's cache.
    active: bool = False


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a new summary must cover: ``messages`` = source[start:covered], extending
    ``previous`` (the prior summary's text) when there is one."""

    messages: tuple[ChatMessage, ...]  # what the summarizer reads
    previous: str | None
    start: int
    covered: int


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What rendering needs again once a summary text exists."""

    policy: PolicySettings
    model: str
    counter: TokenCounter
    working: list[ChatMessage]
    counts: list[int]
    fixed_tokens: int  # reply priming + tools schemas
    budget: int
    summary_max_chars: int


class PlanBasis(TypedDict):
    """The fields of a ``Plan`` measured before any strategy runs (the same for every strategy)."""

    source: list[ChatMessage]
    strategy: str
    tokens_before: int
    grouping: Grouping
    interaction_tokens: tuple[int, ...]
    cleared: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    messages: list[ChatMessage]  # the exact list to send
    source: list[ChatMessage]  # the cleaned incoming list (what checkpoints index and hash)
    strategy: str
    fired: tuple[str, ...]  # hard triggers crossed: compaction is due now
    near: tuple[str, ...]  # triggers past soft_fraction (includes fired): summarize ahead
    tokens_before: int
    tokens_after: int
    applied_checkpoint: str | None
    grouping: Grouping
    interaction_tokens: tuple[int, ...]
    cut: int  # source[preamble_len:cut] is not sent verbatim (summarized or dropped), but task
    kept_from: int  # first source index sent verbatim after the preamble (>= cut: window)
    cleared: tuple[int, ...]  # source indexes of tool results replaced by a stub
    summary_request: SummaryRequest | None
    summary_text: str | None = None
    # The user message sent again right after the summary: the verbatim part starts inside its
    # interaction (a cut between tool rounds), so the task itself is never summarized away.
    task: int | None = None
    # A compaction that cannot leave room to grow (proxy.core.headroom): the tokens no cut can
    # shrink (preamble, tools, summary) and where the next summary starts.
    headroom_short: tuple[int, int] | None = None
    # Interactions before the ``interactions`` trigger fires, while it is only near (ahead mode
    # predicts from it when to start the summary: proxy.compaction.money.pace).
    interactions_left: int | None = None
    _context: PlanContext | None = field(default=None, repr=False, compare=False)

    @property
    def changed(self) -> bool:
        """The sent list is not the (cleaned) incoming one."""
        return self.messages is not self.source

    @property
    def applied_parts(self) -> tuple[str, ...]:
        """What the sent list changed, in a fixed order: ``summary`` (one ``<agent_summary>``
        stands for old turns), ``dropped`` (old turns left out with no summary standing for
        them: neuralyze, trim, the hard budget), ``stubs`` (tool results sent as stubs). Empty
        when nothing changed."""
        if not self.changed:
            return ()
        parts = []
        summarized = self.summary_text is not None
        if summarized:
            parts.append("summary")
        if self.kept_from > (self.cut if summarized else self.grouping.preamble_len):
            parts.append("dropped")
        if any(i >= self.kept_from for i in self.cleared):  # stubs before it are not sent
            parts.append("stubs")
        return tuple(parts)

    @property
    def blocked(self) -> bool:
        """A trigger fired but nothing is cut and no summary can be asked for."""
        return bool(self.fired) and not self.changed and self.summary_request is None

    def sending(self, messages: list[ChatMessage], tokens_after: int) -> Plan:
        """This plan sending ``messages`` (``tokens_after`` tokens) instead: what recall's notes
        and tool make of it, a few copies a request. ``dataclasses.replace`` without its detour
        through ``__init__``, which sets each of the twenty fields through ``object.__setattr__``
        (4.4 -> 0.6 us): a plan is frozen data, copied as it is (no ``__post_init__``)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, messages=messages, tokens_after=tokens_after)
        return copy

    def with_summary(
        self, text: str, covered: int | None = None, *, checkpoint_id: str | None = None
    ) -> Plan:
        """The plan once a new summary exists: preamble + summary + source[covered:], then the
        window. ``covered`` defaults to the summary request's; it must be a safe cut."""
        ctx = self._context
        if ctx is None:
            raise ValueError("this plan cannot be rendered again (strategy off)")
        if covered is None:
            if self.summary_request is None:
                raise ValueError("covered is required when the plan asked for no summary")
            covered = self.summary_request.covered
        if not self.grouping.is_cut(covered):
            raise ValueError(f"covered={covered} is not a safe cut point")
        head = [
            *ctx.working[: self.grouping.preamble_len],
            render_summary_message(
                text,
                max_chars=ctx.summary_max_chars,
                final_prompt=ctx.policy.summarizer.final_prompt,
            ),
        ]
        messages, kept_from, task, tokens = assemble(ctx, self.grouping, head, covered)
        return replace(
            self,
            messages=messages,
            tokens_after=tokens,
            kept_from=kept_from,
            task=task,
            cut=covered,
            applied_checkpoint=checkpoint_id,
            summary_request=None,
            summary_text=text,
        )


def assemble(
    ctx: PlanContext, grouping: Grouping, head: list[ChatMessage], cut: int
) -> tuple[list[ChatMessage], int, int | None, int]:
    """head + the task message (when ``cut`` falls inside its interaction) + working[cut:], then
    the hard budget; returns (messages, kept_from, task, tokens)."""
    head_tokens = sum(ctx.counter.per_message(head, ctx.model)) + ctx.fixed_tokens
    start = cut
    if ctx.budget and head_tokens + grouping.kept_tokens(ctx.counts, start) > ctx.budget:
        # Drop the oldest kept rounds or interactions (at safe cuts) until it fits.
        start = cut_deeper(grouping, ctx.counts, start, ctx.budget - head_tokens)
    task = grouping.task_before(start)
    tokens = head_tokens + grouping.kept_tokens(ctx.counts, start)
    preamble = grouping.preamble_len
    if start == preamble and len(head) == preamble:
        return ctx.working, start, None, tokens  # nothing changed
    # The pinned messages before the cut and the task, verbatim and in order (proxy.core.pins).
    again = [ctx.working[i] for i in grouping.sent_again(start)]
    return [*head, *again, *ctx.working[start:]], start, task, tokens


def cut_deeper(grouping: Grouping, counts: list[int], cut: int, budget: int) -> int:
    """The first cut point at or after ``cut`` whose verbatim part fits ``budget`` tokens, never
    past ``grouping.last_cut()`` (the task message and the newest round always stay). Pinned
    messages are sent whatever the cut: moving it past them saves nothing, and when they alone
    exceed the budget the prompt stays over it (the provider says so, nothing is dropped)."""
    cuts = grouping.cuts
    deepest = grouping.last_cut()
    i = bisect_left(cuts, cut)
    tail = grouping.kept_tokens(counts, cut)
    position = cut
    if (
        isinstance(counts, Summed)
        and cuts
        and not grouping.pinned
        and budget < tail
        and cut < deepest
    ):
        # Every cut whose messages alone exceed the budget is walked past: start at the first
        # that does not (found by the running sums), unless the deepest comes before it.
        floor = counts.running[-1] - budget
        j = bisect_left(cuts, floor, lo=bisect_right(cuts, cut), key=counts.running.__getitem__)
        j = min(j, bisect_left(cuts, deepest), len(cuts) - 1)
        if cuts[j] > cut:
            i, position = j, cuts[j]
            tail = grouping.kept_tokens(counts, position)
    pins = set(grouping.pinned)
    task = grouping.task_tokens(counts, position, pins)  # the task sent again at ``position``
    while position < deepest and i < len(cuts):
        if tail <= budget:
            break
        if cuts[i] <= position:
            i += 1
            continue
        deeper = cuts[i]
        tail -= task
        task = grouping.task_tokens(counts, deeper, pins)
        tail += task
        if pins:
            tail -= sum(counts[j] for j in range(position, deeper) if j not in pins)
        else:
            tail -= sum(counts[position:deeper])
        position = deeper
    return position
