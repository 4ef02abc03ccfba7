"""A plan as plain data: what the admin preview returns and what ``simulate`` prints.

The views are ``dict[str, Any]``: JSON going out, serialized as it is and read by no module.
"""

from __future__ import annotations

from typing import Any

from proxy.core import history
from proxy.core.checkpoints import Checkpoint, Record
from proxy.core.plan import Plan


def describe_plan(plan: Plan, *, include_messages: bool = True) -> dict[str, Any]:
    grouping = plan.grouping
    gone = "summarized" if plan.summary_text is not None else "dropped"
    interactions = []
    for k in range(len(grouping)):
        start, end = grouping.span(k)
        rounds = sum(start < b <= end for b in grouping.round_ends)
        if end <= plan.cut and start >= grouping.preamble_len:
            fate = gone
        elif start < plan.cut < end:
            # A cut between tool rounds: the older rounds go, the user message is sent again.
            fate = f"{gone} to message {plan.cut - 1}, user message kept"
            if plan.kept_from > plan.cut:
                fate += f", {plan.cut}..{min(plan.kept_from, end) - 1} dropped (window)"
        elif plan.cut <= start and end <= plan.kept_from:
            fate = "dropped (window)"
        elif plan.cut <= start < plan.kept_from < end:
            fate = f"dropped (window) to message {plan.kept_from - 1}"
            fate += ", user message kept" if plan.task == start else ""
        else:
            fate = "kept"
        interactions.append(
            {
                "index": k,
                "messages": [start, end],
                "tokens": plan.interaction_tokens[k],
                "rounds": rounds,
                "safe_cut_before": grouping.safe[k],
                "fate": fate,
            }
        )
    request = plan.summary_request
    view: dict[str, Any] = {
        "strategy": plan.strategy,
        "fired": list(plan.fired),
        "near": list(plan.near),
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after,
        "preamble_messages": grouping.preamble_len,
        "interactions": interactions,
        "blocked": plan.blocked,
        "cut": plan.cut,
        "kept_from": plan.kept_from,
        "task_sent_again": plan.task,
        "cleared_tool_results": list(plan.cleared),
        "pinned_messages": list(grouping.pinned),
        "applied_checkpoint": plan.applied_checkpoint,
        "summary_needed": None
        if request is None
        else {
            "messages": [request.start, request.covered],
            "extends_previous": request.previous is not None,
        },
    }
    if include_messages:
        view["messages"] = plan.messages
    return view


def describe_checkpoint(checkpoint: Checkpoint, *, include_summary: bool = True) -> dict[str, Any]:
    view = {
        "id": checkpoint.id,
        "parent_id": checkpoint.parent_id,
        "covered_messages": checkpoint.covered,
        "summary_tokens": checkpoint.summary_tokens,
        "dropped_messages": checkpoint.dropped_messages,
        "dropped_tokens": checkpoint.dropped_tokens,
        "tokens_saved": max(checkpoint.dropped_tokens - checkpoint.summary_tokens, 0),
        "model": checkpoint.model,
        "strategy": checkpoint.strategy,
        "created_at": checkpoint.created_at,
        "focus": checkpoint.focus,
    }
    if include_summary:
        view["summary"] = checkpoint.summary
    return view


def describe_record(record: Record) -> dict[str, Any]:
    """Every stored checkpoint, newest (or last restored) first; ``current`` is the one an
    operator edits by default and ``retired`` marks those a restore set aside
    (``proxy.core.history``)."""
    current = history.current(record)
    return {
        "conversation_id": record.conversation_id,
        "updated_at": record.updated_at,
        "current": None if current is None else current.id,
        "checkpoints": [
            {**describe_checkpoint(c), "retired": c.id in record.retired}
            for c in record.checkpoints
        ],
    }
