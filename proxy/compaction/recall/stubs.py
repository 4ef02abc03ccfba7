"""The stubs of the tool results a plan cleared, made to name their originals (recall's notes),
and what names them carried from request to request (``StubHistories``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from operator import is_
from typing import NamedTuple

from proxy.compaction.recall.calls import ARGS_CHARS, Calls, calls_by_id, one_line, text_of
from proxy.compaction.recall.covered import Piece, handle_of
from proxy.core.carried import Held
from proxy.core.clearing import CLEARED_STUB
from proxy.core.plan import Plan
from proxy.core.summary_message import escape_tags
from proxy.types import ChatMessage

# The core's stub (proxy/core/clearing.py), its token count captured.
_STUB = re.compile("^" + re.escape(CLEARED_STUB).replace(re.escape("{tokens}"), r"(\d+)") + "$")
_TOOLS = ("tool", "function")


class StubHistory(NamedTuple):
    """What names the stubs of one history: its messages (a private copy), their calls (the
    last call of an id names it), their tool results by call id (the last of an id), and what
    each original's stub was made to say so far, by the original's id (the object is held in
    ``messages``): (its piece, the call it was named after, the stub's tokens, its text)."""

    messages: list[ChatMessage]
    calls: Calls
    results: dict[str | None, ChatMessage]
    stubs: dict[int, tuple[Piece, tuple[str, str] | None, str, str]]

    def stub(self, salt: str, original: ChatMessage, tokens: str) -> tuple[Piece, str]:
        """(``tool_piece`` of ``original``, the text of its stub of ``tokens`` tokens), made
        once while its call stays the same."""
        call = self.calls.get(str(original.get("tool_call_id")))
        known = self.stubs.get(id(original))
        if known is not None and known[1] == call:
            if known[2] == tokens:
                return known[0], known[3]
            piece = known[0]
        else:
            piece = tool_piece(salt, original, self.calls)
        text = _stub_text(piece, int(tokens))
        self.stubs[id(original)] = (piece, call, tokens, text)  # the same whoever stores it
        return piece, text


class StubHistories:
    """Each history's ``StubHistory``, carried to the next request that begins with its very
    message objects (identity, never equality: ``proxy.core.carried``): a request that sends
    them again with a round appended reads only the round, and its stubs' originals named
    before are not named again. Bounded by histories and by the messages they hold; shared
    with worker threads (a lookup takes a reference, a store is made under a lock)."""

    def __init__(self, *, max_histories: int = 64, max_messages: int = 1 << 17) -> None:
        self._held: Held[StubHistory] = Held(max_histories, max_messages)

    def of(self, source: list[ChatMessage], tag: Hashable) -> StubHistory:
        """The history of ``source`` (in a conversation: ``tag``), read past what was carried."""
        if not source:
            return _read(source, None)
        key = (id(source[0]), tag)
        last = self._held.get(key)
        held = last.messages if last is not None else source
        # map stops at the shorter list: all of ``held`` is compared when it is not longer.
        if last is not None and len(held) <= len(source) and all(map(is_, held, source)):
            if len(held) == len(source):
                return last
            history = _read(source, last)
        else:
            history = _read(source, None)
        self._held.put(key, history)
        return history


def _read(source: list[ChatMessage], last: StubHistory | None) -> StubHistory:
    """The history of ``source``; past ``last``'s messages (its very objects) when given."""
    new = source[len(last.messages) :] if last is not None else source
    results = {m.get("tool_call_id"): m for m in new if m.get("role") in _TOOLS}
    if last is None:
        return StubHistory(source[:], calls_by_id(new), results, {})
    calls = {**last.calls, **calls_by_id(new)}
    return StubHistory(source[:], calls, {**last.results, **results}, dict(last.stubs))


def name_stubs(
    plan: Plan,
    salt: str,
    calls: Callable[[], Calls],
    history: StubHistory | None,
    messages: list[ChatMessage],
    changed: list[int],
    pieces: dict[str, Piece],
) -> None:
    """Each stub of a result the plan cleared made to name its handle (in ``messages``, its
    position added to ``changed``), its original added to ``pieces``. ``history``: the
    source's, carried (``StubHistories``), or None (read here)."""
    source = plan.source
    if history is None:
        results = {m.get("tool_call_id"): m for m in source if m.get("role") in _TOOLS}
    else:
        results = history.results
    cleared_ids = {source[i].get("tool_call_id") for i in plan.cleared}
    for n, message in enumerate(messages):
        if message.get("role") not in _TOOLS:
            continue
        content = message.get("content")
        found = _STUB.match(content) if isinstance(content, str) else None
        if found is None or message.get("tool_call_id") not in cleared_ids:
            continue
        original = results.get(message.get("tool_call_id"))
        if original is None:
            continue
        if history is None:
            piece = tool_piece(salt, original, calls())
            text = _stub_text(piece, int(found.group(1)))
        else:
            piece, text = history.stub(salt, original, found.group(1))
        pieces[piece.handle] = piece
        messages[n] = {**message, "content": text}
        changed.append(n)


def _stub_text(piece: Piece, tokens: int) -> str:
    label = escape_tags(piece.label)
    return f"[tool result cleared to save context: {label}, {tokens:,} tokens; recall id {piece.handle}]"


def tool_piece(salt: str, result: ChatMessage, calls: Calls) -> Piece:
    call_id = str(result.get("tool_call_id"))
    name, args = calls.get(call_id, (one_line(str(result.get("name") or "tool"), ARGS_CHARS), ""))
    text = text_of(result.get("content"))
    label = f"tool output of {name} {args}".rstrip()
    return Piece(handle_of(salt, "tool:" + call_id, text), label, text)
