"""The cache breakpoint the proxy adds to an Anthropic Messages body it rewrote.

Anthropic caches a prompt's prefix only at ``cache_control`` marks (the SDK's
``CacheControlEphemeralParam``: ``{"type": "ephemeral"}``, optionally ``"ttl": "5m" | "1h"``), on
tools, system text blocks and message content blocks, or once for the whole request at its top
level (automatic caching: the mark goes on the last cacheable block). A request may hold at most
four; a fifth is a 400. Marks of a longer TTL must come before marks of a shorter one.

When the proxy injected text into ``system`` (a summary, a notice), the prompt's head up to the
end of it stays the same until the next summary: a mark on the last injected block caches that
compacted prefix, whatever the client does with its own marks. The client's marks are never
moved or removed: the proxy adds its mark only when the request holds fewer than four, and with
a TTL of an hour when a later mark of the client's has one (the order rule).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MAX_BREAKPOINTS = 4
MARK = "cache_control"
_LONG_TTL = "1h"


def _marks_in(blocks: object) -> Iterator[dict[str, Any]]:
    """The marks of a list of content blocks, those nested in tool results included."""
    if not isinstance(blocks, list):
        return
    for block in blocks:
        if not isinstance(block, dict):
            continue
        mark = block.get(MARK)
        if mark:
            yield mark if isinstance(mark, dict) else {}
        yield from _marks_in(block.get("content"))


def _later_marks(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The marks after ``system`` in the prompt: the messages' and the top-level one (it lands
    on the last cacheable block)."""
    for message in body.get("messages") or ():
        if isinstance(message, dict):
            yield from _marks_in(message.get("content"))
    top = body.get(MARK)
    if top:
        yield top if isinstance(top, dict) else {}


def breakpoints(body: dict[str, Any]) -> int:
    """How many cache breakpoints ``body`` holds: tools, system, messages and the top level."""
    return (
        sum(1 for _ in _marks_in(body.get("tools")))
        + sum(1 for _ in _marks_in(body.get("system")))
        + sum(1 for _ in _later_marks(body))
    )


def with_injected_mark(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (its ``system`` ending with a block the proxy injected) with a mark on that
    block, unless the request already holds four marks or the block carries one."""
    system = body.get("system")
    if not isinstance(system, list) or not system or MARK in system[-1]:
        return body
    if breakpoints(body) >= MAX_BREAKPOINTS:
        return body
    mark: dict[str, Any] = {"type": "ephemeral"}
    if any(m.get("ttl") == _LONG_TTL for m in _later_marks(body)):
        mark["ttl"] = _LONG_TTL
    return {**body, "system": [*system[:-1], {**system[-1], MARK: mark}]}
