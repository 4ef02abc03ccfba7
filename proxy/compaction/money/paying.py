"""The price trigger: compact when it pays for itself (docs/cost.md#deciding-by-price).

The token triggers fire at fixed sizes; a policy with ``trigger.pays`` (the default) also fires
when compacting *now* costs less, over the turns the conversation can be expected to go on,
than sending it whole: the rule and its arithmetic are ``proxy.economics.decision``. This module
gathers what the rule weighs for one request:

- the prompt as planned (``current``) and as it would be sent compacted: the same plan with the
  ``pays`` trigger fired (the policy's own ``keep``; in one long agent run, down to a share of
  ``pays_from_tokens``, as the token triggers cut deeper), with the ready summary when one was
  made ahead of time (its cost is spent: only the cache break counts), else with a summary of
  the estimated size (a tenth of what it reads, at most ``max_summary_tokens``);
- the summarizer's call: what it reads, billed at its model's price, uncached;
- the conversation's pace (``proxy.compaction.money.pace``): its growth per turn, and the turns to come,
  estimated as many as it has had (a conversation that has gone on for 40 turns is as likely as
  not to go on for 40 more: the estimate known as the Lindy or Copernican rule);
- what of the cached prefix the compaction keeps (``prefix_break``): the tools and the system
  prompt before the summary, read from a warm cache; none when the compaction brings in the
  recall tool, which goes with the tools and moves everything after it (once, as the tool stays
  on every later request of the conversation);
- the turns until a token trigger compacts the conversation regardless of price: waiting for
  a larger cut past it is not a choice;
- whether the cache is warm: the conversation's previous request came less than
  ``CACHE_TTL_SECONDS`` ago. A cold cache costs the uncompacted prompt a full write too, so that
  is the moment compacting costs no break.

It looks only at prompts of ``pays_from_tokens`` or more, with a known pace (two growing turns
seen) and a price to decide with (the model's, else ``pricing.reference``: a local model or a
gateway's alias is decided at a typical agent model's prices); otherwise the token triggers
decide alone. It also weighs, at any size, the summary a tool trigger alone asks for
(``on_tool_success`` / ``on_tool_error``): made only when it pays, else the request is planned as
if the tool trigger had not fired. The prompt's tokens are the proxy's counts: the decision
compares two prompts counted alike, so a tokenizer that differs from the provider's moves both
sides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from proxy.compaction.conversation import Conversation
from proxy.compaction.money.pace import Pace, turns_to_trigger
from proxy.compaction.planning import plan_with
from proxy.compaction.settings import CompactionSettings
from proxy.core.checkpoints import Checkpoint
from proxy.core.headroom import PAYS
from proxy.core.plan import Plan, SummaryRequest
from proxy.core.tokens import REPLY_PRIMING, TokenCounter
from proxy.economics.decision import Outlook, PriceDecision, decide
from proxy.economics.prices import PriceTable

CACHE_TTL_SECONDS = 300.0  # Anthropic's cache life; OpenAI keeps an idle prefix 5-10 minutes
SUMMARY_SHARE = 0.1  # a summary is estimated at this share of what it reads...
SUMMARY_FLOOR_TOKENS = 256  # ...and at least this many tokens
INSTRUCTION_TOKENS = 600  # the summarizer's own prompt around the transcript
# The turns still to come, as a share of those seen (the Lindy estimate: as many again).
REMAINING_SHARE = 1.0
# Triggers that say when a step ended, not that the prompt is large: weighed by price.
TOOL_TRIGGERS = frozenset({"on_tool_success", "on_tool_error"})


@dataclass(frozen=True, slots=True)
class PriceCheck:
    """The price trigger's verdict for one request: the plan to send when it fired."""

    decision: PriceDecision
    plan: Plan

    @property
    def fired(self) -> bool:
        return self.decision.compact


# The conversation's pace, its known growth per turn and the time of the request.
_At = tuple[Pace, float, float]


class AddedTool(Protocol):
    """A tool the proxy adds to a compacted request (the recall tool): named here, not imported,
    so that money sits below recall, which prices its own rounds with ``spending``."""

    def tool_tokens(self, conv: Conversation) -> int | None: ...


class PriceTrigger:
    """Decides, for one planned request, whether compacting now pays."""

    def __init__(
        self,
        settings: CompactionSettings,
        prices: PriceTable,
        counter: TokenCounter,
        recall: AddedTool | None = None,
    ) -> None:
        self._settings = settings
        self._prices = prices
        self._counter = counter
        self._recall = recall  # what a compacted request gains: the recall tool

    def looks_at(self, conv: Conversation, current: Plan) -> bool:
        """Whether ``decide`` may change this request's plan (before the pace is read): a prompt
        the price trigger weighs, or a plan a tool trigger alone fired."""
        return (
            self._weighs_size(conv, current)
            or self._weighs_tools(conv, current)
            or self._weighs_stubs(conv, current)
        )

    def decide(
        self,
        conv: Conversation,
        current: Plan,
        checkpoint: Checkpoint | None,
        pace: Pace | None,
        now: float,
    ) -> Plan:
        """The plan to send: ``current``, the price trigger's when compacting now pays, or, when
        a tool trigger alone fired and its summary does not pay, the plan without the tool
        triggers. Blocking: plans the conversation again (CPU work)."""
        if self._weighs_tools(conv, current):
            return self._tools(conv, current, checkpoint, pace, now)
        growth = pace.growth_per_turn if pace is not None else None
        if pace is not None and growth is not None and self._weighs_stubs(conv, current):
            instead = self._instead_of_stubs(conv, current, checkpoint, (pace, growth, now))
            if instead is not None:
                return instead
        check = self.check(conv, current, checkpoint, pace, now)
        return check.plan if check is not None and check.fired else current

    def _instead_of_stubs(
        self, conv: Conversation, current: Plan, checkpoint: Checkpoint | None, at: _At
    ) -> Plan | None:
        """A summary instead of a new batch of stubs, when it pays against them: the batch moves
        the cached prefix from its first stub on (under Anthropic's breakpoints, everything
        after the system prompt is written again), so the choice is between two breaks, not
        between a break and a warm read, and a summary that leaves a shorter prompt than the
        stubs do costs less to write and saves more a turn. The batch is then held back (sent
        as the previous request sent it), so the prefix moves once, when the summary applies.
        None: no new batch, or the summary does not pay against it. ``at``: the pace, its growth
        per turn and the time now."""
        pace, growth, now = at
        counter = self._counter
        # Only a stored summary this request does not apply yet can be ready; planning for it
        # on every request would plan a long history once more for nothing.
        if checkpoint is not None and current.applied_checkpoint != checkpoint.id:
            ready = plan_with(conv, checkpoint, counter=counter, fire=(PAYS,))
            if _ready(ready, current):  # made after the batch was held back, or ahead
                check = self._weigh(conv, current, ready, pace, growth, now)
                return ready if check is not None and check.fired else None
        end = held_back(conv, current, checkpoint, counter)
        if end is None:
            return None
        held = plan_with(conv, checkpoint, counter=counter, stubs_before=end)
        if held.tokens_after < conv.policy.trigger.pays_from_tokens:
            return None
        candidate = plan_with(conv, checkpoint, counter=counter, fire=(PAYS,), stubs_before=end)
        check = self._weigh(conv, current, candidate, pace, growth, now, cold=True)
        return check.plan if check is not None and check.fired else None

    def check(
        self,
        conv: Conversation,
        current: Plan,
        checkpoint: Checkpoint | None,
        pace: Pace | None,
        now: float,
    ) -> PriceCheck | None:
        """The price trigger's verdict, or None when it does not look at this request (see the
        module's docstring). Blocking: plans the conversation a second time (CPU work)."""
        if pace is None or not self._weighs_size(conv, current):
            return None
        growth = pace.growth_per_turn
        if growth is None:
            return None
        candidate = plan_with(conv, checkpoint, counter=self._counter, fire=(PAYS,))
        return self._weigh(conv, current, candidate, pace, growth, now)

    def _decides_by_price(self, conv: Conversation) -> bool:
        """A summarizing policy under ``pays`` with a price to decide with."""
        policy = conv.policy
        return (
            policy.strategy == "summarize"
            and policy.trigger.pays
            and self._prices.for_decision(conv.model).priced
        )

    def _weighs_size(self, conv: Conversation, current: Plan) -> bool:
        return (
            not current.fired
            and current.tokens_after >= conv.policy.trigger.pays_from_tokens
            and self._decides_by_price(conv)
        )

    def _weighs_stubs(self, conv: Conversation, current: Plan) -> bool:
        """Stubs sent, in a history of ``pays_from_tokens`` or more: a new batch among them may
        be weighed against a summary (``_instead_of_stubs``)."""
        return (
            not current.fired
            and bool(current.cleared)
            and current.tokens_before >= conv.policy.trigger.pays_from_tokens
            and self._decides_by_price(conv)
        )

    def _weighs_tools(self, conv: Conversation, current: Plan) -> bool:
        """A tool trigger fired, and no other: under ``pays`` and a priced model, the summary it
        asks for is made only when it pays. A tool outcome says when a step ended, not that
        compacting pays: a summary of a small prompt, or one cutting little, costs its cache
        break for a saving that never pays it back (a public mini-swe-agent session cost more
        than sending direct through coding-agent.yaml)."""
        return (
            bool(current.fired)
            and set(current.fired) <= TOOL_TRIGGERS
            and self._decides_by_price(conv)
        )

    def _tools(
        self,
        conv: Conversation,
        current: Plan,
        checkpoint: Checkpoint | None,
        pace: Pace | None,
        now: float,
    ) -> Plan:
        """The tool trigger's plan when compacting pays, else the plan without the tool triggers
        (the window safety net and the other token triggers did not fire: nothing of theirs is
        vetoed). A pace the store did not give keeps the tool's plan (fail open: as configured)."""
        if pace is None:
            return current
        trigger = conv.policy.trigger.model_copy(
            update={"on_tool_success": (), "on_tool_error": ()}
        )
        calm_conv = replace(conv, policy=conv.policy.model_copy(update={"trigger": trigger}))
        calm = plan_with(calm_conv, checkpoint, counter=self._counter)
        growth = pace.growth_per_turn or 0.0
        weighed = self._weigh(conv, calm, current, pace, growth, now)
        if weighed is not None and weighed.fired:
            return current
        # Without the tool's summary, the prompt may still be one the price trigger weighs.
        check = self.check(conv, calm, checkpoint, pace, now)
        return check.plan if check is not None and check.fired else calm

    def _weigh(
        self,
        conv: Conversation,
        current: Plan,
        candidate: Plan,
        pace: Pace,
        growth: float,
        now: float,
        *,
        cold: bool = False,
    ) -> PriceCheck | None:
        """Whether sending ``candidate`` (compacted, or asking for a summary) instead of
        ``current`` pays; None when the candidate neither applies nor asks for a summary.
        ``cold``: ``current`` does not read the cache either (it moves the prefix too)."""
        policy = conv.policy
        price = self._prices.for_decision(conv.model)
        own = self._settings.summarizer.for_policy(policy, request_model=conv.model)
        summary_in = summary_out = 0
        compacted = candidate.tokens_after
        if not _ready(candidate, current):  # no ready summary applies: one must be made first
            wanted = candidate.summary_request
            if wanted is None:
                return None
            counter = self._counter.with_facts(conv.facts)
            summary_in = _summary_reads(candidate, wanted, counter, conv.model)
            summary_in += INSTRUCTION_TOKENS
            if wanted.previous:  # the same stored summary, weighed on every request
                summary_in += counter.count_again(wanted.previous, own.model)
            summary_out = min(
                own.max_summary_tokens,
                max(SUMMARY_FLOOR_TOKENS, int(summary_in * SUMMARY_SHARE)),
            )
            compacted = candidate.with_summary(_placeholder(summary_out)).tokens_after
        warm = not cold and pace.at is not None and 0 <= now - pace.at < CACHE_TTL_SECONDS
        tool = self._recall.tool_tokens(conv) if self._recall is not None else None
        moved = prefix_break(conv, current, self._counter, tool)
        outlook = Outlook(
            prompt_tokens=current.tokens_after,
            compacted_tokens=compacted + moved.added_tokens,
            summary_input_tokens=summary_in,
            summary_output_tokens=summary_out,
            growth_per_turn=growth,
            remaining_turns=pace.samples * REMAINING_SHARE,
            cache_warm=warm,
            kept_prefix_tokens=moved.kept_tokens,
            trigger_turns=turns_to_trigger(conv, current, growth),
        )
        summarizer_price = self._prices.price(own.model)
        if not summarizer_price.priced:  # an unpriced summarizer is not free: price it alike
            summarizer_price = price
        verdict = decide(outlook, price, summarizer_price=summarizer_price)
        return PriceCheck(verdict, candidate)


@dataclass(frozen=True, slots=True)
class PrefixBreak:
    """What compacting this request does to the start of the prompt the provider has cached."""

    kept_tokens: int  # the tokens at its start still cached once compacted
    added_tokens: int  # what the proxy adds to the compacted request (the recall tool)


def prefix_break(
    conv: Conversation, current: Plan, counter: TokenCounter, tool_tokens: int | None
) -> PrefixBreak:
    """A summary replaces turns after the preamble: the tools and the preamble (the system
    prompt) before it stay the same bytes, cached. Unless the compaction brings in the recall
    tool (``tool_tokens``: None when the request would get none): a request that sends stubs or
    a summary carries it (``Recall.prepare``), rendered with the tools, before the system prompt,
    so the first such request moves the whole prefix, billed again from its first token. Once
    the tool is there it stays, and a next compaction keeps the prefix."""
    sends_tool = bool(current.cleared or current.summary_text)
    if tool_tokens is not None and not sends_tool:
        return PrefixBreak(0, tool_tokens)
    counter = counter.with_facts(conv.facts)
    preamble = conv.messages[: current.grouping.preamble_len]
    tools = counter.count_tools(conv.tools, conv.model)
    return PrefixBreak(tools + counter.count_messages(preamble, conv.model), 0)


def held_back(
    conv: Conversation, current: Plan, checkpoint: Checkpoint | None, counter: TokenCounter
) -> int | None:
    """Where ``current``'s new batch of stubs starts: the index before which the previous
    request stubbed the same results (None: it stubs none the previous request sent whole, or
    that request applied another summary, which moved the prefix anyway). The previous request
    is this history up to its newest assistant message, the answer it got; stubs are batched
    on the history's prefix, so its stubs are the first of this one's."""
    messages = conv.messages
    reply = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
        None,
    )
    if reply is None:
        return None
    before = plan_with(replace(conv, messages=messages[:reply]), checkpoint, counter=counter)
    if before.applied_checkpoint != current.applied_checkpoint:
        return None
    if set(current.cleared) <= set(before.cleared):
        return None
    return max(before.cleared) + 1 if before.cleared else 0


def _summary_reads(
    candidate: Plan, wanted: SummaryRequest, counter: TokenCounter, model: str
) -> int:
    """What the summary ``candidate`` asks for reads (``count_messages`` of its messages): the
    source's messages it covers less the pinned ones, whose counts the planner carried."""
    start, end = wanted.start, wanted.covered
    pinned = [i for i in candidate.grouping.pinned if start <= i < end]
    if len(wanted.messages) != end - start - len(pinned):  # not the planner's: count them
        return counter.count_messages(list(wanted.messages), model)
    counts = counter.history_counts(candidate.source, model)
    return sum(counts[start:end]) - sum(counts[i] for i in pinned) + REPLY_PRIMING


def _ready(candidate: Plan, current: Plan) -> bool:
    """The candidate applies a summary that exists and that this request does not send yet
    (one made ahead of time). After a compaction both apply the conversation's checkpoint: the
    candidate then differs only by the next summary it asks for, which is to be made, so the
    decision is weighed again with the applied checkpoint as the base as the prompt grows."""
    return candidate.changed and candidate.applied_checkpoint != current.applied_checkpoint


def _placeholder(tokens: int) -> str:
    """A text of about ``tokens`` tokens, standing for a summary not written yet."""
    return " x" * tokens
