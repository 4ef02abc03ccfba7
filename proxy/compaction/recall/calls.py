"""The calls of a history, named in brief by id, and a message's content as plain text: what
recall's stubs, segments and index lines are made of."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy import wirejson
from proxy.types import ChatMessage, ToolCall

ARGS_CHARS = 60  # a call's arguments, in brief, in a stub or an index line
_BLOCK_DEPTH = 8  # content blocks within blocks (a tool_result's) read for their text
Calls = dict[str, tuple[str, str]]  # tool_call_id -> (tool name, arguments in brief)


def calls_by_id(source: list[ChatMessage], *, only: set[str] | None = None) -> Calls:
    """tool_call_id -> (tool name, arguments in brief), each on one line (of the ids ``only``
    names, when given); the last call of an id names it."""
    found: Calls = {}
    for message in source:
        for call in tool_calls(message):
            key = str(call.get("id"))
            if only is None or key in only:
                name, arguments = call_parts(call)
                found[key] = (one_line(name, ARGS_CHARS), _brief(arguments))
    return found


def tool_calls(message: ChatMessage) -> list[ToolCall]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def call_parts(call: Mapping[str, Any]) -> tuple[str, object]:
    """A call's name and arguments, whatever its type: a ``function`` call's, a ``custom``
    one's (its ``input``); a shape this does not know is a call of "tool"."""
    for kind, arguments in (("function", "arguments"), ("custom", "input")):
        body = call.get(kind)
        if isinstance(body, dict):
            return str(body.get("name") or "tool"), body.get(arguments)
    return "tool", None


def _brief(arguments: object) -> str:
    try:
        # Bounded before it is parsed: a client may send arguments nested a thousand deep.
        data = wirejson.loads_shallow(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        data = arguments
    if isinstance(data, dict):
        text = " ".join(v if isinstance(v, str) else _json_text(v) for v in data.values())
    else:
        text = "" if data is None else data if isinstance(data, str) else _json_text(data)
    return one_line(text, ARGS_CHARS)


def one_line(text: str, limit: int) -> str:
    """``text`` with its whitespace (newlines too) collapsed, cut to ``limit`` characters: a
    label is one line, so what a client named its tool cannot add a line to the index."""
    text = " ".join(text[: limit * 4].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_of(content: object, depth: int = 0) -> str:
    """A message's content as plain text (a string, or the text parts of a list of blocks,
    blocks within blocks to a few levels)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content if depth < _BLOCK_DEPTH else ():
            if isinstance(part, dict):
                value = part.get("text", part.get("content", ""))
                parts.append(value if isinstance(value, str) else text_of(value, depth + 1))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else _json_text(content)


def _json_text(value: object) -> str:
    """A value that is not text, as JSON (one nested past what any walk may descend: a note)."""
    if not wirejson.nests_within(value):
        return "[a value nested too deeply to show]"
    return wirejson.encode(value).decode("utf-8", "replace")
