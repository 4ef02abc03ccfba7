"""The planner: messages + policy + state in, the exact messages to send out. Pure, synchronous.

Stages, in order (docs/policies.md "The building blocks"; docs/architecture.md "The planner"):

1. Incoming ``<agent_summary>`` messages are stripped; the rest is grouped into interactions.
2. ``pin``: the messages the policy pins are found (``proxy.core.pins``); they are never cleared,
   summarized or dropped, and are sent verbatim, in order, after the summary.
   ``clear_tool_results``: tool results older than N interactions or N tool rounds, larger than
   ``min_tokens``, are replaced by a short stub (same ``tool_call_id``, so pairs stay whole)
   before any decision.
3. Triggers are measured on the prompt as it would be sent without a new summary.
4. The strategy, one small function each (``_STRATEGIES``), all starting from the measured
   conversation (``_Measured``) and answering what to send (``_Decision``):
   - ``summarize``: a prior summary (a checkpoint the store matched) is applied once the
     uncompacted conversation crosses a trigger; from then on the triggers are measured on
     "preamble + summary + newer turns", so a new summary is asked for only when *that* grows
     past a trigger (``fired``), or, ahead of time, past ``soft_fraction`` of one (``near``).
     The request covers [prior.covered or preamble, cut) and extends the prior's text (running
     summary). The plan stays sendable as it is; ``with_summary`` renders the result. A prior
     whose rendered summary is not smaller than what it replaces is not applied (short turns).
   - cuts fall at interaction starts or tool-round boundaries (``interactions.Grouping``); one
     inside an interaction sends that interaction's user message again right after the summary.
     When what ``keep`` keeps, with the preamble, the tools and the summary, would leave no
     room to grow under the next summary's start (a large fixed prompt, one long agent run),
     the cut moves deeper, round by round (``proxy.core.headroom``), always keeping the task
     message and the newest round.
   - ``neuralyze``: when a trigger fires, old interactions are dropped (optional notice).
   - ``trim``: always keeps only the newest interactions the ``keep`` setting allows (a
     short-term window, like max_tokens); triggers are reported but not needed.
   - ``off``: the messages go out exactly as they came.
5. ``window_tokens`` (and a retry's ``budget_tokens``): a final hard budget; the oldest kept
   rounds or interactions are dropped until the prompt fits, never the task message or the
   newest round.

Nothing here is random or time-dependent, so the same input gives the same prompt (and keeps the
provider's prompt cache warm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from proxy.core.carried import CARRY_FROM
from proxy.core.clearing import clear_tool_results
from proxy.core.headroom import Headroom, with_headroom
from proxy.core.interactions import Grouping, span_sum, strip_agent_summaries
from proxy.core.keep import first_kept, keep_for
from proxy.core.pins import PINNED, pinned, unpinned
from proxy.core.plan import (
    Plan,
    PlanBasis,
    PlanContext,
    PriorSummary,
    SummaryRequest,
    assemble,
    cut_deeper,
)
from proxy.core.policy import KeepSettings, ModelInfo, PolicySettings
from proxy.core.summary_message import DEFAULT_MAX_CHARS, is_agent_summary, render_summary_message
from proxy.core.tokens import REPLY_PRIMING, TokenCounter
from proxy.core.triggers import Verdict, evaluate, matching, measure
from proxy.types import ChatMessage

FORCED = "forced"
# A rescue keeps the verbatim part within this share of its budget, the rest for the summary.
RESCUE_VERBATIM_SHARE = 0.75


def plan(
    messages: list[ChatMessage],  # validated (``proxy.core.messages``)
    policy: PolicySettings,
    *,
    model: str,
    counter: TokenCounter,
    model_info: ModelInfo | None,
    prior: PriorSummary | None,
    tools: object = None,
    force: bool = False,
    budget_tokens: int = 0,
    summary_max_chars: int = DEFAULT_MAX_CHARS,
    fire: tuple[str, ...] = (),
    stubs_before: int | None = None,
) -> Plan:
    """Decide what to send. ``force`` (with ``budget_tokens``) compacts as hard as the rules
    allow, for a retry after the provider said the context was too long: a trigger counts as
    fired, only the last interaction is kept (with a budget, only as many of its newest rounds
    as leave room for the summary; when it is the only one left, its task and newest round),
    and the budget is applied like ``window_tokens``. ``fire`` names triggers decided outside
    the core (the price trigger, ``proxy.compaction.money.paying``): they count as fired, with the
    policy's own ``keep``. ``stubs_before``: only tool results before this index are stubbed (a
    batch of ``clear_tool_results`` held back, as the previous request sent it)."""
    if policy.strategy == "native":  # the provider compacts; planned here: its fallback
        policy = policy.model_copy(update={"strategy": policy.native.fallback})
    # off is fully transparent: not even a client's echoed summary is touched.
    compacts, final_prompt = policy.strategy != "off", policy.summarizer.final_prompt
    marked = compacts and _marked(messages, final_prompt, counter)
    source = strip_agent_summaries(messages, final_prompt=final_prompt) if marked else messages
    grouping = counter.groupings.group(source)
    if compacts and (policy.pin or (marked and any(PINNED in m for m in source))):
        # The policy's pins, and what a dialect pinned (PINNED).
        facts = counter.facts_of(source) if policy.pin else None
        found = pinned(source, grouping, policy.pin, facts)
        if found:
            grouping = replace(grouping, pinned=found)
    fixed = REPLY_PRIMING + counter.count_tools(tools, model)
    source_counts = counter.history_counts(source, model)
    tokens_before = span_sum(source_counts) + fixed
    # A summary in use replaces what it covers: stubs are batched on what is sent after it, so
    # each batch saves its threshold where the provider bills it (and stays byte-stable until
    # the next summary, which moves the prefix anyway).
    in_use = _prior_cut(prior, grouping) if prior is not None and prior.active else None
    working, counts = source, source_counts
    cleared: tuple[int, ...] = ()
    clearing = policy.clear_tool_results
    if clearing.older_than_interactions or clearing.older_than_rounds:
        working, counts, cleared = clear_tool_results(
            source,
            source_counts,
            grouping,
            policy,
            counter,
            model,
            start=in_use or 0,
            end=stubs_before,
        )
    per_interaction = grouping.tokens_each(counts)
    base = PlanBasis(
        source=source,
        strategy=policy.strategy,
        tokens_before=tokens_before,
        grouping=grouping,
        interaction_tokens=per_interaction,
        cleared=cleared,
    )
    preamble = grouping.preamble_len
    if policy.strategy == "off":
        return Plan(
            messages=messages,
            fired=(),
            near=(),
            tokens_after=tokens_before,
            applied_checkpoint=None,
            cut=preamble,
            kept_from=preamble,
            summary_request=None,
            **base,
        )

    budgets = [b for b in (policy.window_tokens, budget_tokens) if b > 0]
    ctx = PlanContext(
        policy, model, counter, working, counts, fixed, min(budgets, default=0), summary_max_chars
    )
    window = model_info.context_window if model_info else None
    decision = _STRATEGIES[policy.strategy](
        _Measured(ctx, source, source_counts, grouping, window, force, fire), prior
    )
    sent, kept_from, task, tokens_after = assemble(ctx, grouping, decision.head, decision.render_at)
    applied, short = decision.applied, decision.short
    return Plan(
        messages=sent,
        fired=decision.current.fired,
        near=decision.current.near,
        interactions_left=decision.current.interactions_left,
        tokens_after=tokens_after,
        applied_checkpoint=applied.checkpoint_id if applied else None,
        cut=decision.render_at,
        kept_from=kept_from,
        summary_request=decision.summary_request,
        summary_text=applied.text if applied else None,
        task=task,
        headroom_short=None if short is None else (short.fixed_tokens, short.starts_at),
        _context=ctx,
        **base,
    )


@dataclass(frozen=True, slots=True)
class _Measured:
    """What every strategy starts from: the cleaned, grouped and counted conversation."""

    ctx: PlanContext
    source: list[ChatMessage]  # before tool results were cleared: what a summary reads
    source_counts: list[int]  # its tokens per message
    grouping: Grouping
    window: int | None  # the model's context window, when known
    force: bool  # an overflow retry: compact as hard as the rules allow
    fire: tuple[str, ...] = ()  # triggers fired by a decision made outside the core

    @property
    def preamble(self) -> list[ChatMessage]:
        return self.ctx.working[: self.grouping.preamble_len]

    def verdict(self, since: int, head: list[ChatMessage]) -> Verdict:
        """The triggers, measured on ``head`` + the task message (when ``since`` falls inside
        its interaction) + working[since:]: the prompt as it would be sent."""
        ctx, grouping = self.ctx, self.grouping
        trigger = ctx.policy.trigger
        found = measure(
            ctx.working,
            ctx.counts,
            grouping,
            trigger,
            since=since,
            tokens=sum(ctx.counter.per_message(head, ctx.model))
            + grouping.kept_tokens(ctx.counts, since)
            + ctx.fixed_tokens,
            sent_messages=len(head) + len(grouping.sent_again(since)) + len(ctx.working) - since,
            context_window=self.window,
            matched=matching(ctx.working, trigger.conditions, ctx.counter.carried),
        )
        result = evaluate(trigger, found, soft_fraction=ctx.policy.soft_fraction)
        if self.force:
            result = replace(result, fired=(*result.fired, FORCED), near=(*result.near, FORCED))
        if self.fire:
            result = replace(
                result, fired=(*result.fired, *self.fire), near=(*result.near, *self.fire)
            )
        return result

    def unstubbed(self) -> Verdict:
        """The triggers measured on the history as the client sent it, no tool result stubbed.
        In an append-only history it only grows, so what it makes due stays due; the prompt
        with stubs shrinks each time a batch of results is cleared, and a summary made due by
        it came and went with the batches."""
        if self.ctx.working is self.source:
            return self.verdict(self.grouping.preamble_len, self.preamble)
        ctx = replace(self.ctx, working=self.source, counts=self.source_counts)
        return replace(self, ctx=ctx).verdict(self.grouping.preamble_len, self.preamble)

    def cut(
        self, floor: int, current: Verdict, head: list[ChatMessage], *, deeper: bool
    ) -> Headroom:
        """Where the verbatim part starts (never before ``floor``): what ``keep`` allows, moved
        deeper when ``deeper`` so that the compaction leaves room to grow (``proxy.core.headroom``);
        on a forced retry, the last interaction (or, with a budget, its newest rounds that leave
        room for the summary)."""
        ctx, grouping = self.ctx, self.grouping
        preamble = grouping.preamble_len
        if self.force:
            cut = grouping.start_of(grouping.safe_at_or_before(len(grouping) - 1))
            if ctx.budget:  # the newest rounds that leave room for the summary
                room = int(ctx.budget * RESCUE_VERBATIM_SHARE) - span_sum(ctx.counts, 0, preamble)
                room -= ctx.fixed_tokens
                cut = cut_deeper(grouping, ctx.counts, max(cut, floor), room)
            elif cut <= floor:  # one long interaction: everything but its task and newest round
                cut = grouping.last_cut()
            return Headroom(max(cut, floor))
        cut = first_kept(
            grouping, ctx.counts, ctx.policy.keep, context_window=self.window, floor=floor
        )
        if not deeper or not current.near:  # no summary starts soon: no room to make
            return Headroom(max(cut, floor))
        # The next summary will be about as long as the one applied now, if any.
        summary_tokens = sum(ctx.counter.per_message(head[preamble:], ctx.model))
        whole_turns = _counts_whole_turns(keep_for(grouping, ctx.policy.keep), self.window)
        headroom = with_headroom(
            ctx,
            grouping,
            max(cut, floor),
            current,
            self.window,
            summary_tokens=summary_tokens,
            whole_turns=whole_turns,
        )
        return replace(headroom, cut=max(headroom.cut, floor))


@dataclass(frozen=True, slots=True)
class _Decision:
    """A strategy's answer: send ``head`` + working[render_at:] (then the hard budget)."""

    head: list[ChatMessage]
    render_at: int
    current: Verdict  # the triggers as measured on what is sent
    applied: PriorSummary | None = None
    summary_request: SummaryRequest | None = None
    short: Headroom | None = None  # a compaction that cannot leave room to grow


def _summarize(m: _Measured, prior: PriorSummary | None) -> _Decision:
    """Apply the prior summary when it is due and saves something; ask for the next one when a
    trigger is near. Nothing is dropped here: the plan stays sendable as it is."""
    grouping = m.grouping
    preamble = grouping.preamble_len
    head = m.preamble
    raw = m.verdict(preamble, head)
    floor = preamble
    applied: PriorSummary | None = None
    current = raw
    head_with: list[ChatMessage] | None = None  # a prior that would not save anything
    prior_cut = _prior_cut(prior, grouping)
    if prior is not None and prior_cut is not None:
        summary = render_summary_message(
            prior.text,
            max_chars=m.ctx.summary_max_chars,
            final_prompt=m.ctx.policy.summarizer.final_prompt,
        )
        head_with = [*head, summary]
        with_prior = m.verdict(prior_cut, head_with)
        floor = prior_cut
        # Past a trigger, or compacted already: it applies when it saves something. Both are
        # measured on what the client sent, so once a summary is in use every later request
        # of an append-only history applies it too (or a newer one).
        if prior.active or raw.fired or m.unstubbed().fired:
            if _smaller(m, head_with, prior_cut):
                applied, head, current = prior, head_with, with_prior
                head_with = None
        else:
            head_with = None
            current = with_prior  # waiting for its trigger: it already covers what it covers
    render_at = prior_cut if applied is not None and prior_cut is not None else preamble
    if not current.near:  # no summary to ask for: where its cut would fall does not matter
        return _Decision(head, render_at, current, applied)
    room = m.cut(floor, current, head, deeper=True)
    cut = room.cut
    summary_request = None
    start = prior_cut if prior is not None and prior_cut is not None else preamble
    # After a summary that was not smaller than its turns, the next one (about as long, since
    # it extends it) is asked for only once it can be: not on every turn.
    worth = head_with is None or _smaller(m, head_with, cut)
    if cut > start and worth:
        previous = prior.text if prior is not None and prior_cut is not None else None
        summarized = unpinned(m.source, start, cut, grouping.pinned)  # pins are sent as they are
        summary_request = SummaryRequest(summarized, previous, start, cut)
    short = room if room.short and summary_request is not None else None
    return _Decision(head, render_at, current, applied, summary_request, short)


def _neuralyze(m: _Measured, prior: PriorSummary | None) -> _Decision:
    """When a trigger fires, drop the old interactions (with the policy's notice, if any)."""
    preamble = m.grouping.preamble_len
    head = m.preamble
    current = m.verdict(preamble, head)
    if not current.fired:
        return _Decision(head, preamble, current)
    room = m.cut(preamble, current, head, deeper=True)
    notice = m.ctx.policy.neuralyze_notice
    if notice and room.cut > preamble:
        head = [*head, {"role": "system", "content": notice}]
    return _Decision(head, room.cut, current, short=room if room.short else None)


def _trim(m: _Measured, prior: PriorSummary | None) -> _Decision:
    """Always keep only the newest interactions ``keep`` allows; triggers are only reported."""
    preamble = m.grouping.preamble_len
    head = m.preamble
    current = m.verdict(preamble, head)
    return _Decision(head, m.cut(preamble, current, head, deeper=False).cut, current)


# ``off`` is not here: it never measures, cuts or renders anything (see ``plan``).
_STRATEGIES: dict[str, Callable[[_Measured, PriorSummary | None], _Decision]] = {
    "summarize": _summarize,
    "neuralyze": _neuralyze,
    "trim": _trim,
}


def _marked(messages: list[ChatMessage], final_prompt: str | None, counter: TokenCounter) -> bool:
    """Whether a message is a summary of ours echoed back (stripped) or one a dialect pinned
    (``PINNED``): a mark per message, carried as the history grows (most hold none); a short
    list is not carried (a plain request does not enter the carried module)."""
    carried, tag = counter.carried if len(messages) >= CARRY_FROM else None, ("marks", final_prompt)
    marks: list[int] = [] if carried is None else carried.known(messages, tag)  # bools
    if len(marks) < len(messages):
        ours = partial(is_agent_summary, final_prompt=final_prompt)
        marks += [
            (m.get("role") == "system" and ours(m)) or PINNED in m for m in messages[len(marks) :]
        ]
        if carried is not None:
            carried.keep(messages, marks, tag)
    return any(marks)


def _prior_cut(prior: PriorSummary | None, grouping: Grouping) -> int | None:
    """Where a prior summary ends, if that is still a safe cut point of this history (an
    interaction start or a round boundary; a task message inside it is sent again) that keeps
    the newest round (a regenerated reply can leave a summary reaching past it); else None."""
    if prior is None or not grouping.preamble_len < prior.covered <= grouping.last_cut():
        return None
    return prior.covered if grouping.is_cut(prior.covered) else None


def _smaller(m: _Measured, head: list[ChatMessage], cut: int) -> bool:
    """The summary (and the task and pinned messages sent again) cost fewer tokens than the
    messages they replace: a summary of a few short turns can be longer than the turns. The
    messages as the client sent them, not their stubs: the stubs of a covered part grow in
    number from request to request, and a summary must not be dropped when they do."""
    ctx, grouping = m.ctx, m.grouping
    preamble = grouping.preamble_len
    added = sum(ctx.counter.per_message(head[preamble:], ctx.model))
    added += sum(ctx.counts[i] for i in grouping.sent_again(cut))
    return added < span_sum(m.source_counts, preamble, cut)


def _counts_whole_turns(keep: KeepSettings, window: int | None) -> bool:
    """The keep setting counts interactions or messages, not tokens (so it knows no budget)."""
    return bool(keep.interactions or keep.messages or (keep.fraction and not window))
