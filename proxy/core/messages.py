"""OpenAI chat messages: validation of the full vocabulary, and reading their text.

Validation checks only what the planner relies on (roles, content shapes, tool call ids) and
carries every other field through untouched: providers extend the format faster than we can
follow, and an unknown field is theirs to judge, not ours. The dicts are returned as they came
(same objects, same order) so nothing the client sent is rewritten by accident.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final, cast

from proxy.core.facts import FactLookup, Facts
from proxy.errors import InvalidMessage, InvalidRequest
from proxy.types import ChatMessage, MessageView

# On a neutral tool message: its provider marked the result as an error (Anthropic's
# ``is_error``, which Claude Code also sets on a call the user rejected), whatever its text says.
FAILED: Final = "_failed"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

# Part types each role may send (https://platform.openai.com/docs/api-reference/chat/create).
# Unknown part types are carried through; only the known ones are checked.
_PART_FIELDS = {
    "text": ("text", str),
    "image_url": ("image_url", dict),
    "input_audio": ("input_audio", dict),
    "file": ("file", dict),
    "refusal": ("refusal", str),
}
_CONTENT_REQUIRED = frozenset({"system", "developer", "user", "tool"})
_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})  # need nothing but content


# The edge: a request body's JSON comes in; past this check the list is read as ChatMessage.
def validate_messages(
    raw: object, *, facts: FactLookup | None = None, known: list[Facts] | None = None
) -> list[ChatMessage]:
    """Check a request's ``messages``; return the same list or raise InvalidMessage.

    With ``facts`` (``proxy.core.facts``) a message validated before, on this turn or an
    earlier one, is not checked again. ``known``: the facts of the first messages, objects an
    earlier request scanned (a parsed body's taken items); on success it holds every message's.
    """
    if not isinstance(raw, list):
        raise InvalidRequest("messages must be an array", param="messages")
    if not raw:
        raise InvalidRequest("messages must not be empty", param="messages")
    cache = facts
    if cache is None:
        for index, message in enumerate(raw):
            _validate_message(index, message)
        return cast("list[ChatMessage]", raw)
    # The known ones passed this check when they were scanned: only the new are looked at.
    first = len(known) if known and len(known) <= len(raw) else 0
    found = cache.carry(raw, known) if known else cache.scan(raw)
    for index in range(first, len(found)):
        checked = found[index]
        if not checked.valid:
            _validate_message(index, raw[index])
            checked.valid = True
    if known is not None:
        known[:] = found
    return cast("list[ChatMessage]", raw)


def _validate_message(index: int, message: object) -> None:
    if not isinstance(message, dict):
        raise InvalidMessage(index, "", "must be an object")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessage(index, "role", f"must be one of {', '.join(sorted(ROLES))}")
    if len(message) == 2 and role in _PLAIN_ROLES and isinstance(message.get("content"), str):
        return  # {role, content: "..."}: most of a long history, nothing more to check
    _validate_content(index, role, message)
    for field in ("name", "tool_call_id"):
        if field in message and not isinstance(message[field], str):
            raise InvalidMessage(index, field, "must be a string")
    # Required, but an empty string is as valid as any other (the spec sets no minimum length,
    # and providers accept it); pairing copes with empty ids (proxy.core.interactions).
    if role == "tool" and "tool_call_id" not in message:
        raise InvalidMessage(index, "tool_call_id", "is required for a tool message")
    if role == "function" and "name" not in message:
        raise InvalidMessage(index, "name", "is required for a function message")
    if message.get("tool_calls") is not None:
        if role != "assistant":
            raise InvalidMessage(index, "tool_calls", "only assistant messages carry tool calls")
        _validate_tool_calls(index, message["tool_calls"])
    if message.get("function_call") is not None:
        _validate_function(index, "function_call", message["function_call"])


def _validate_content(index: int, role: str, message: dict[str, Any]) -> None:  # JSON, unchecked
    content = message.get("content")
    if content is None:
        if role in _CONTENT_REQUIRED:
            raise InvalidMessage(index, "content", f"is required for a {role} message")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidMessage(index, "content", "must be a string, an array of parts or null")
    for p, part in enumerate(content):
        field = f"content[{p}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidMessage(index, field, "must be an object with a string type")
        expected = _PART_FIELDS.get(part["type"])
        if expected and not isinstance(part.get(expected[0]), expected[1]):
            kind = "a string" if expected[1] is str else "an object"
            raise InvalidMessage(index, f"{field}.{expected[0]}", f"must be {kind}")


def _validate_tool_calls(index: int, tool_calls: object) -> None:
    if not isinstance(tool_calls, list):
        raise InvalidMessage(index, "tool_calls", "must be an array")
    for c, call in enumerate(tool_calls):
        field = f"tool_calls[{c}]"
        if not isinstance(call, dict):
            raise InvalidMessage(index, field, "must be an object")
        if not isinstance(call.get("id"), str):
            raise InvalidMessage(index, f"{field}.id", "must be a string")
        if call.get("type", "function") == "function":
            _validate_function(index, f"{field}.function", call.get("function"))


def _validate_function(index: int, field: str, function: object) -> None:
    if not isinstance(function, dict):
        raise InvalidMessage(index, field, "must be an object")
    if not isinstance(function.get("name"), str):
        raise InvalidMessage(index, f"{field}.name", "must be a string")
    if not isinstance(function.get("arguments", ""), str):
        raise InvalidMessage(index, f"{field}.arguments", "must be a string")


# --- reading -----------------------------------------------------------------------------------


def content_text(content: object) -> str:
    """The text of a content value: the string, or the text/refusal parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_texts(content))
    return ""


def _part_texts(parts: list[Any]) -> Iterator[str]:
    for part in parts:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                yield text


def tool_call_ids(message: MessageView) -> list[str]:
    """Ids of the tool calls an assistant message makes (empty for any other message)."""
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def tool_names(message: MessageView) -> dict[str, str]:
    """Map tool call id -> function name for an assistant message's calls."""
    names: dict[str, str] = {}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            function = call.get("function") or call.get("custom") or {}
            names[call["id"]] = str(function.get("name", "")) if isinstance(function, dict) else ""
    return names


def calls_text(message: MessageView) -> str:
    """The tool/function calls of an assistant message as compact text (name + arguments)."""
    calls = [
        c.get("function") or c.get("custom")
        for c in message.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    if isinstance(message.get("function_call"), dict):
        calls.append(message["function_call"])
    return "\n".join(
        f"{c.get('name', '')}({c.get('arguments', c.get('input', ''))})"
        for c in calls
        if isinstance(c, dict)
    )


def is_error_result(message: MessageView, pattern: re.Pattern[str]) -> bool:
    """A tool result failed: its provider marked it so (``FAILED``), it parses as an error
    object, or its text matches ``pattern``."""
    if message.get(FAILED) is True:
        return True
    text = content_text(message.get("content"))
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except (ValueError, RecursionError):  # not JSON, or JSON no parser should descend into
            data = None
        if isinstance(data, dict) and (
            data.get("error") not in (None, False, "") or data.get("is_error") is True
        ):
            return True
    return bool(pattern.search(text))
