"""Pins: messages a policy says must never be summarized, cleared or dropped (docs/policies.md,
"Pins").

A policy's ``pin:`` is a list of expressions in the language of trigger ``conditions``
(``proxy.core.conditions``); a message any of them matches is pinned. An expression sees:

- ``message``: the message dict as the core holds it; ``role``: its role;
- ``text``: its content as plain text; ``contains(s)``: ``s in text``;
- ``tool``: for a tool result, the name of the tool it answers (else None);
- ``calls``: for an assistant message, the names of the tools it calls (else empty);
- ``turn``: the number of its interaction (0 = the first; the preamble is -1);
- the functions ``len``, ``str``, ``int``, ``float``, ``any``, ``all``.

Examples: ``role == "user"`` (every user message, as OpenAI's own compaction keeps them),
``contains("#keep")``, ``tool == "read_spec"``. An expression that fails to evaluate on a message
does not match it, and never fails a request.

A tool call and its results travel together: pinning any message of a tool round (the assistant
message with the calls and every result answering it) pins the whole round, so a pinned result is
never sent without its call. The preamble is always sent and needs no pin.

A dialect may also pin a message itself, whatever the policy says, by setting ``PINNED`` on the
neutral message: Anthropic's ``role: "system"`` messages inside ``messages`` are instructions the
client placed among its turns, and an instruction is never summarized, cleared or dropped.

Pinned messages older than the cut are sent verbatim, in their original order, right after the
summary (with the task message when it is sent again); the planner counts them against ``keep``
and the window like any other message (``Grouping.sent_again``). Pins are a pure function of the
history, so the next request pins the same messages and its prompt keeps the same prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final, TypeVar

from simpleeval import EvalWithCompoundTypes

from proxy.core.conditions import parse_expression
from proxy.core.facts import Facts
from proxy.core.interactions import Grouping, group
from proxy.core.messages import content_text
from proxy.types import MessageView

log = logging.getLogger(__name__)

M = TypeVar("M", bound=MessageView)  # the caller's messages come back as it holds them

# Set (True) by a dialect on a neutral message that is pinned whatever the policy's ``pin:``.
PINNED: Final = "_pinned"
_FUNCTIONS = {"len": len, "str": str, "int": int, "float": float, "any": any, "all": all}
NAMES = frozenset({"message", "role", "text", "tool", "calls", "turn", "True", "False", "None"})
_RESULT_ROLES = frozenset({"tool", "function"})


class Pin:
    """One compiled pin expression; ``matches`` is safe to call on any message."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        functions = {**_FUNCTIONS, "contains": _never}
        self._evaluator = EvalWithCompoundTypes(functions=functions, names={})
        self._tree = parse_expression(expression, self._evaluator, NAMES)

    def matches(self, names: dict[str, Any]) -> bool:  # the expression's variables, not a message
        """Whether the message described by ``names`` (``_names_of``) is pinned by this one."""
        text = names["text"]
        self._evaluator.names = names
        self._evaluator.functions["contains"] = lambda s: isinstance(s, str) and s in text
        try:
            return bool(self._evaluator.eval(self.expression, previously_parsed=self._tree))
        except Exception as exc:  # a user's expression must never fail a request
            log.debug("pin %r did not evaluate: %s", self.expression, exc)
            return False


def check_pin(expression: str) -> None:
    """Raise ValueError naming what is wrong with a pin expression (the config's check)."""
    Pin(expression)


@lru_cache(maxsize=256)
def compile_pins(expressions: tuple[str, ...]) -> tuple[Pin, ...]:
    """Pins are parsed once per distinct policy, not per request."""
    return tuple(Pin(e) for e in expressions)


def pinned(
    messages: Sequence[MessageView],
    grouping: Grouping,
    expressions: tuple[str, ...],
    facts: Sequence[Facts] | None = None,
) -> tuple[int, ...]:
    """Indexes of the pinned messages after the preamble, ascending, closed over tool rounds.
    ``facts`` (each message's, ``proxy.core.facts``) remembers each answer, so a long history
    is evaluated once, not on every request. Messages a dialect marked ``PINNED`` are always
    among them."""
    marked = {i for i in range(grouping.preamble_len, len(messages)) if messages[i].get(PINNED)}
    if not expressions:
        return tuple(sorted(marked))  # instructions: no tool round to close over
    pins = compile_pins(expressions)
    call_names: dict[str, str] = {}  # tool call id -> the tool's name
    round_of: dict[str, int] = {}  # tool call id -> index of the assistant message calling it
    members: dict[int, list[int]] = {}  # assistant index -> its round's indexes
    chosen: set[int] = marked
    last_function_call = -1  # legacy functions carry no id: a result answers the latest call
    starts = set(grouping.starts)
    turn = -1
    for i in range(grouping.preamble_len, len(messages)):
        message = messages[i]
        turn += i in starts
        role = message.get("role")
        calls: tuple[str, ...] = ()
        tool = None
        if role == "assistant":
            calls = _calls(message, i, call_names, round_of)
            if message.get("function_call") is not None:
                last_function_call = i
        elif role in _RESULT_ROLES:
            call_id = message.get("tool_call_id")
            tool = call_names.get(call_id) if isinstance(call_id, str) else None
            tool = tool or (message.get("name") if isinstance(message.get("name"), str) else None)
            owner = round_of.get(call_id) if isinstance(call_id, str) else None
            if owner is None and role == "function" and last_function_call >= 0:
                owner = last_function_call
            if owner is not None:
                members.setdefault(owner, [owner]).append(i)
        # All else an expression sees comes from the message's content: the fact's key.
        key = (expressions, turn, tool)
        known = facts[i].pins if facts is not None else None
        found = known.get(key) if known is not None else None
        if found is None:
            names = {
                "message": message,
                "role": role,
                "text": content_text(message.get("content")),
                "tool": tool,
                "calls": calls,
                "turn": turn,
            }
            found = any(pin.matches(names) for pin in pins)
            if facts is not None:
                if known is None:
                    known = facts[i].pins = {}
                known[key] = found
        if found:
            chosen.add(i)
    for round_members in members.values():  # a call and its results travel together
        if chosen.intersection(round_members):
            chosen.update(round_members)
    return tuple(sorted(chosen))


def unpinned(messages: Sequence[M], start: int, end: int, pins: Sequence[int]) -> tuple[M, ...]:
    """messages[start:end] without the pinned ones: what a summary reads (pins are never
    summarized: they are sent as they are)."""
    skip = set(pins)
    return tuple(messages[i] for i in range(start, end) if i not in skip)


def to_summarize(
    messages: Sequence[M], expressions: tuple[str, ...], start: int, end: int
) -> tuple[M, ...]:
    """messages[start:end] less what ``expressions`` (or a dialect, ``PINNED``) pin in
    ``messages`` (a cleaned history)."""
    if not expressions and not any(m.get(PINNED) for m in messages[start:end]):
        return tuple(messages[start:end])
    return unpinned(messages, start, end, pinned(messages, group(messages), expressions))


def _calls(
    message: MessageView, index: int, names: dict[str, str], round_of: dict[str, int]
) -> tuple[str, ...]:
    """The tool names an assistant message calls, noting each call's name and owner."""
    found = []
    tool_calls = message.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        call_id = call.get("id")
        if isinstance(name, str):
            found.append(name)
        if isinstance(call_id, str):
            round_of[call_id] = index
            if isinstance(name, str):
                names[call_id] = name
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and isinstance(legacy.get("name"), str):
        found.append(legacy["name"])
    return tuple(found)


def _never(_: object) -> bool:  # replaced per message by ``Pin.matches``
    return False
