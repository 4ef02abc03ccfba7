"""A conversation planned with a checkpoint: the core's planner, given what compaction knows.

The rewriter, the overflow rescue and the admin API plan the same way: the checkpoint becomes
the planner's prior summary, counted through the conversation's facts.
"""

from __future__ import annotations

from functools import partial

from proxy import tracing
from proxy.compaction.conversation import Conversation
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan import Plan, PriorSummary
from proxy.core.planner import plan
from proxy.core.tokens import TokenCounter

# The strategy recorded on a checkpoint summarized ahead of time, before any trigger fired.
AHEAD = "summarize-ahead"


def plan_with(
    conv: Conversation,
    checkpoint: Checkpoint | None,
    *,
    counter: TokenCounter,
    force: bool = False,
    budget: int = 0,
    fire: tuple[str, ...] = (),
    stubs_before: int | None = None,
) -> Plan:
    """What the conversation's policy sends with ``checkpoint`` (``force``, ``budget``: a
    compaction as hard as the rules allow, as for an overflow retry; ``fire``: triggers fired by
    a decision made outside the core, the price trigger's; ``stubs_before``: a new batch of
    stubs held back). Blocking: CPU work."""
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
    planning = partial(
        plan,
        conv.messages,
        conv.policy,
        model=conv.model,
        counter=counter.with_facts(conv.facts),
        model_info=conv.model_info,
        prior=prior,
        tools=conv.tools,
        force=force,
        budget_tokens=budget,
        fire=fire,
        stubs_before=stubs_before,
    )
    if not tracing.on:
        return planning()
    with tracing.span("compaction.plan") as traced:
        planned = planning()
        if traced is not None:
            traced.set_attributes(
                {
                    "compaction.tokens_before": planned.tokens_before,
                    "compaction.tokens_after": planned.tokens_after,
                    "compaction.strategy": conv.policy.strategy,
                }
            )
        return planned


def must_summarize_now(conv: Conversation, current: Plan) -> bool:
    """inline mode: whenever a trigger fires; ahead mode: only when the request as it stands
    would not fit the model's window (otherwise it goes out now and is summarized after)."""
    if conv.policy.mode == "inline":
        return True
    window = conv.model_info.context_window if conv.model_info else None
    return window is not None and current.tokens_after > window


def may_pay(conv: Conversation, current: Plan) -> bool:
    """Whether the price trigger may change this plan, by the plan alone: a summarizing policy
    under ``pays``, and a prompt of ``pays_from_tokens`` or more (or a history of as many that
    stubs bring under it) or a trigger fired (a tool trigger is weighed at any size). ``PriceTrigger.looks_at`` decides the rest (the price)."""
    policy = conv.policy
    trigger = policy.trigger
    large = current.tokens_after >= trigger.pays_from_tokens
    # Stubs bring a prompt under pays_from_tokens: a summary may pay instead of a new batch.
    stubbed = bool(current.cleared) and current.tokens_before >= trigger.pays_from_tokens
    return (
        policy.strategy == "summarize"
        and trigger.pays
        and (large or stubbed or bool(current.fired))
    )


def outcome_of(current: Plan, *, pending: bool) -> str:
    """What X-Compaction says when nothing failed: ``skipped`` only when nothing was due
    (``pending``: a summary is queued for after the answer)."""
    if current.changed:
        return "applied"
    if not current.fired:
        return "skipped"
    # A trigger fired: either its summary is being made after this response (ahead mode, the
    # prompt still fits), or nothing can be cut (one message over the trigger, or a summary
    # that would not be smaller than what it replaces).
    return "pending" if pending else "blocked"
