"""Triggers: which of a policy's thresholds a prompt crosses (any one fires).

Every numeric trigger fires when its measure is *over* the threshold, and is "near" when the
measure is over ``soft_fraction`` of it (near includes fired). 0 disables a trigger; so does
``context_fraction`` when the model's window is unknown.

- ``input_tokens``: tokens of the prompt (messages and tools schemas).
- ``context_fraction``: the same tokens against that fraction of the model's context window.
- ``interactions``: interactions since the last summary (all of them when there is none); one
  the summary covers only part of (earlier tool rounds of a long task) counts.
- ``interaction_tokens``: tokens in those interactions.
- ``messages``: messages in the prompt.
- ``on_tool_success`` / ``on_tool_error``: a named tool (or a call of it whose command matches,
  ``Bash(pytest)``: ``proxy.core.tool_calls``) succeeded / failed in a result new in this request: the tool messages the request ends with (those after the assistant message the
  previous request was answered with). Not the whole last interaction: in an agent run that is
  every round since the task, and one passing result would fire on every later turn.
  A result fails when it parses as an error object or matches ``tool_error_pattern``.
- ``conditions``: only interactions holding a message that matches all of them count towards
  ``interactions`` and ``interaction_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from proxy.core.carried import Carried, each
from proxy.core.conditions import Condition
from proxy.core.interactions import Grouping, span_sum
from proxy.core.messages import is_error_result
from proxy.core.policy import TriggerSettings
from proxy.core.tool_calls import ToolCall, calls_of, tool_matches
from proxy.types import ChatMessage


@dataclass(frozen=True, slots=True)
class Measures:
    """What the triggers look at, for one candidate prompt."""

    tokens: int
    messages: int
    interactions: int
    interaction_tokens: int
    context_window: int | None = None
    tools_succeeded: frozenset[ToolCall] = frozenset()
    tools_failed: frozenset[ToolCall] = frozenset()


@dataclass(frozen=True, slots=True)
class Verdict:
    fired: tuple[str, ...]
    near: tuple[str, ...]
    # Interactions still to come before ``interactions`` fires, while it is near and not fired:
    # a request adds at most one, so it is also a floor on the turns left (ahead mode).
    interactions_left: int | None = None


def evaluate(trigger: TriggerSettings, measures: Measures, *, soft_fraction: float) -> Verdict:
    fired: list[str] = []
    near: list[str] = []
    window = measures.context_window
    thresholds = (
        ("input_tokens", measures.tokens, trigger.input_tokens),
        ("context_fraction", measures.tokens, trigger.context_fraction * window if window else 0),
        ("interactions", measures.interactions, trigger.interactions),
        ("interaction_tokens", measures.interaction_tokens, trigger.interaction_tokens),
        ("messages", measures.messages, trigger.messages),
    )
    for name, value, threshold in thresholds:
        if threshold <= 0:
            continue
        if value > threshold:
            fired.append(name)
        if value > threshold * soft_fraction:
            near.append(name)
    for name, wanted, seen in (
        ("on_tool_success", trigger.on_tool_success, measures.tools_succeeded),
        ("on_tool_error", trigger.on_tool_error, measures.tools_failed),
    ):
        matches = tool_matches(wanted)
        if any(match.matches(call) for match in matches for call in seen):
            fired.append(name)
            near.append(name)
    left = None
    if "interactions" in near and "interactions" not in fired:
        left = trigger.interactions - measures.interactions + 1
    return Verdict(tuple(fired), tuple(near), left)


def measure(
    messages: list[ChatMessage],
    counts: list[int],
    grouping: Grouping,
    trigger: TriggerSettings,
    *,
    since: int,
    tokens: int,
    sent_messages: int,
    context_window: int | None,
    matched: Sequence[int] | None = None,
) -> Measures:
    """Measures of a prompt whose verbatim part starts at ``since`` (interactions from there on
    count as "since the last summary", an interaction ``since`` falls inside with its newer
    part). ``matched``: whether each message meets the conditions (``matching``), when known."""
    conditions = compile_conditions(trigger.conditions)
    if conditions and matched is None:
        matched = matching(messages, trigger.conditions)
    interactions = 0
    interaction_tokens = 0
    first = max(grouping.interaction_at(since), 0)
    if not conditions and first < len(grouping) and since < grouping.total:
        # Every interaction from ``first`` on counts, and their tokens run from ``since`` (or
        # the first one's start) to the end: one sum in C, not a loop over interactions.
        interactions = len(grouping) - first
        interaction_tokens = span_sum(counts, max(since, grouping.starts[first]), grouping.total)
    for k in range(first, len(grouping) if conditions else 0):
        start, end = grouping.span(k)
        if end <= since:
            continue
        start = max(start, since)  # a summary may end between the rounds of an interaction
        if matched is not None and not any(matched[start:end]):
            continue
        interactions += 1
        interaction_tokens += span_sum(counts, start, end)
    succeeded: set[ToolCall] = set()
    failed: set[ToolCall] = set()
    if trigger.on_tool_success or trigger.on_tool_error:
        _tool_outcomes(messages, trigger.tool_error_pattern, succeeded, failed)
    return Measures(
        tokens=tokens,
        messages=sent_messages,
        interactions=interactions,
        interaction_tokens=interaction_tokens,
        context_window=context_window,
        tools_succeeded=frozenset(succeeded),
        tools_failed=frozenset(failed),
    )


def matching(
    messages: Sequence[ChatMessage],
    expressions: tuple[str, ...],
    carried: Carried[int] | None = None,
) -> list[int] | None:
    """Whether each message meets every condition (None without conditions): evaluated once a
    message, carried as the history grows (``carried``), not on every verdict of every request."""
    if not expressions:
        return None
    conditions = compile_conditions(expressions)

    def meets(message: ChatMessage) -> bool:
        return all(c.matches(message) for c in conditions)

    met: list[int] = each(carried, messages, ("conditions", expressions), meets)  # bools
    return met


def new_tool_results(messages: list[ChatMessage]) -> int:
    """Where the tool results new in this request start: the trailing tool messages (len when
    the request ends with anything else)."""
    start = len(messages)
    while start and messages[start - 1].get("role") in ("tool", "function"):
        start -= 1
    return start


def _tool_outcomes(
    messages: list[ChatMessage],
    pattern: str,
    succeeded: set[ToolCall],
    failed: set[ToolCall],
) -> None:
    start = new_tool_results(messages)
    if start == len(messages):
        return
    compiled = re.compile(pattern)
    # The calls these results answer: the latest call of each id, found from the newest
    # message back (mostly the one before them), not read out of every message of the history.
    wanted = {str(message.get("tool_call_id")) for message in messages[start:]}
    calls: dict[str, ToolCall] = {}
    for message in reversed(messages[:start]):
        if message.get("role") == "assistant":
            for call_id, made in calls_of(message).items():
                if call_id in wanted:
                    calls.setdefault(call_id, made)
            if len(calls) == len(wanted):
                break
    for message in messages[start:]:
        call = calls.get(str(message.get("tool_call_id")))
        name = message.get("name")
        if call is None and isinstance(name, str) and name:  # a legacy function result
            call = ToolCall(name, "")
        if call is not None and call.name:
            outcome = failed if is_error_result(message, compiled) else succeeded
            outcome.add(call)


@lru_cache(maxsize=256)
def compile_conditions(expressions: tuple[str, ...]) -> tuple[Condition, ...]:
    """Conditions are parsed once per distinct policy, not per request."""
    return tuple(Condition(e) for e in expressions)
