"""The exact key of a message in the fact cache (``proxy.core.facts``): never a hash standing
for it. The common shapes (``{role, content}``, a tool result, an assistant turn of function
calls, all of them strings) are keyed by the tuple of their strings, anything else by its
canonical JSON bytes, so two messages that differ in anything validated, counted or hashed never
share an entry, and no collision can give one history another's digest (the checkpoint chain's
promise, ``proxy.core.checkpoints``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from proxy import wirejson
from proxy.core.digests import DIALECT_FIELD

_PLAIN = frozenset({"role", "content", "name", "tool_call_id"})
_WITH_CALLS = frozenset({"role", "content", "tool_calls"})
_CALL = frozenset({"id", "type", "function"})
_FUNCTION = frozenset({"name", "arguments"})
# Tags start the keys of the other shapes; a plain key has four items, so none can meet another.
_CALLS_TAG = "\x00calls"
_OTHER_TAG = "\x00json"


def key_size(key: Hashable) -> int:
    """The characters ``key`` holds (what the cache's memory bound counts)."""
    if isinstance(key, tuple):
        return sum(len(part) for part in key if isinstance(part, str | bytes))
    return 0


def message_key(message: Any) -> Hashable:
    """An exact key of everything validated, counted or hashed in ``message``.

    In the fast shapes None stands only for an absent field (or a null ``content``, which
    validation, counting and the chain treat as an absent one); a field of any other type or a
    null one sends the message to the canonical JSON key, which tells every JSON value apart
    (``1``, ``1.0``, ``true``). An adapter's private fields (``_wire``) stay out of the key (they
    are neither validated, counted nor hashed), except the hashed ``_hash``."""
    if type(message) is not dict:
        return (_OTHER_TAG, wirejson.canonical(message))
    get = message.get
    content, role = get("content"), get("role")
    if (content is None or type(content) is str) and type(role) is str:
        keys = message.keys()
        if keys <= _PLAIN:
            name, call_id = get("name"), get("tool_call_id")
            if (
                (name is None or type(name) is str)
                and (call_id is None or type(call_id) is str)
                and len(message)
                == 1 + ("content" in message) + (name is not None) + (call_id is not None)
            ):
                return (role, content, name, call_id)
        elif keys <= _WITH_CALLS:
            key = _calls_key(role, content, get("tool_calls"))
            if key is not None:
                return key
    fields = {k: v for k, v in message.items() if k[:1] != "_" or k == DIALECT_FIELD}
    return (_OTHER_TAG, wirejson.canonical(fields))


def _calls_key(role: str, content: str | None, calls: object) -> tuple[str | None, ...] | None:
    """The key of ``{role, content, tool_calls}`` when every call is ``{id, type?, function:
    {name, arguments}}`` of strings; else None."""
    if type(calls) is not list:
        return None
    key: list[str | None] = [_CALLS_TAG, role, content]
    for call in calls:
        if type(call) is not dict or not call.keys() <= _CALL:
            return None
        function = call.get("function")
        if type(function) is not dict or len(function) != 2 or not function.keys() <= _FUNCTION:
            return None
        call_id, kind = call.get("id"), call.get("type")
        name, arguments = function.get("name"), function.get("arguments")
        if not (
            type(call_id) is str
            and type(name) is str
            and type(arguments) is str
            and (type(kind) is str if len(call) == 3 else kind is None and len(call) == 2)
        ):
            return None
        key += (call_id, kind, name, arguments)
    return tuple(key)


def private_copy(message: Any, key: Hashable) -> Any:
    """A copy of ``message`` that nothing else holds when ``key`` is one of the fast shapes (a
    later change to the message cannot reach it), else None: never compared."""
    if type(key) is not tuple or len(key) == 2:  # (_OTHER_TAG, canonical JSON)
        return None
    if len(key) != 4:  # (_CALLS_TAG, role, content, *calls): a plain key has four items
        calls = [{**call, "function": dict(call["function"])} for call in message["tool_calls"]]
        return {**message, "tool_calls": calls}
    return dict(message)
