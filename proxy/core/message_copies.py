"""A private copy of a message of one of the fact cache's fast shapes (``proxy.core.facts``):
a history the cache follows keeps one of each of its messages, and the next request's message
equal to its copy takes its facts after one comparison, which a later change to the message
itself cannot reach.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


def private_copy(message: Any, key: Hashable) -> Any:
    """A copy of ``message`` that nothing else holds when ``key`` is one of the fast shapes (a
    later change to the message cannot reach it), else None: never compared."""
    if type(key) is not tuple or len(key) == 2:  # (_OTHER_TAG, canonical JSON)
        return None
    if len(key) != 4:  # (_CALLS_TAG, role, content, *calls): a plain key has four items
        calls = [{**call, "function": dict(call["function"])} for call in message["tool_calls"]]
        return {**message, "tool_calls": calls}
    return dict(message)
