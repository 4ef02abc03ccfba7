"""A conversation's body sent again, parsed only past the history the last one held.

Most requests of a conversation send its history again with turns appended, and parsing a
long history is most of what a compacted request costs. The last body's bytes are kept with
its history's items as parsed: a body that begins with the same bytes up to the end of those
items holds the same items first (JSON is read the same way twice), so they are taken (the same
objects) and only what follows is parsed; when it also ends with the bytes that followed the
history last time (an agent's tools and settings, sent again), its other fields are taken too,
and only the new items are parsed. A client that changes its newest items (Claude Code
moves its ``cache_control`` mark to the newest message each turn) keeps the items before the
first byte that differs, when the offsets of each item are known: they are for a client that
writes JSON as orjson does (compact, UTF-8 as it is: JavaScript's and Rust's writers), read off
one encoding of each item. Whatever is taken, the value is the one ``wirejson.parse`` gives for
the same bytes, and so is an InvalidRequest: anything unexpected parses the body whole.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy import wirejson

_SPACE = b" \t\r\n"
# Below this size a body is parsed whole and not followed: finding its history's bytes, or
# parsing only what follows them, costs more than parsing it (measured: even at about 8 KB).
FOLLOW_BYTES = 16 << 10
_CANDIDATES = 8  # keys spelled like the history field looked at for the top-level one
_CHUNK = 1 << 16  # bytes compared at once when looking for the first that differs
_KEYS: dict[str, re.Pattern[bytes]] = {}


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A client's body parsed (``value``) and, when its history ``items`` is an array of the
    top-level object, its bytes (``raw``) with the offsets of the end of the last item
    (``end``: the head, what the next body is compared with), of where the first item begins
    (``start``) and, when known, of where each item ends (``ends``)."""

    value: Any
    items: list[Any] | None = None  # the history: the very list in ``value``
    raw: bytes = b""  # the body's bytes (kept as they came: no copy of the head)
    end: int = 0  # the head's length, raw[:end] (0: the body cannot be followed)
    start: int = 0  # offset of the history's first item (just past its '[')
    reused: int = 0  # items taken from the last body
    ends: list[int] | None = None  # offset just past each item
    # Offset of the history's closing ']' once the array is known to be the field's value (no
    # later key of the same name): a body that ends with the same bytes from there has the
    # same other fields, and only its new items are read (0: not known).
    close: int = 0
    # What a dialect made of each item (``AnthropicMessages.conversation`` fills it as it reads
    # the items; it starts with what the last body's taken items were made into).
    translated: list[Any] = field(default_factory=list)
    # The facts (``proxy.core.facts``) of the first items, filled once they all passed
    # validation; it starts with those of the taken items, which are the same objects, unchanged
    # (nothing changes a parsed body), so they need not be looked up again.
    facts: list[Any] = field(default_factory=list)
    # (final_prompt, n): its first n items hold no summary of this proxy's a client echoed back,
    # as ``strip_agent_summaries`` recognises them with that policy's frame (empty: unknown).
    plain: list[tuple[str | None, int]] = field(default_factory=list)

    def plain_for(self, final_prompt: str | None) -> int:
        """How many first items are known to hold no echoed summary, seen with ``final_prompt``."""
        known = self.plain[:1]
        return known[0][1] if known and known[0][0] == final_prompt else 0


def parse_body(raw: bytes, field: str, last: ParsedBody | None = None) -> ParsedBody:
    """``wirejson.parse(raw)``, knowing where its history (the array ``field``) lies in its
    bytes; after ``last``, the conversation's previous body, with the items they share taken."""
    if len(raw) < FOLLOW_BYTES:
        return ParsedBody(wirejson.parse(raw))
    if last is not None and last.items is not None and last.end:
        # Compared in place: a slice of the last body would copy its head.
        if raw.startswith(memoryview(last.raw)[: last.end]):  # the history again, as most are
            taken, end = len(last.items), last.end
        else:
            taken = _shared(raw, last)
            end = last.ends[taken - 1] if taken and last.ends else 0
        again = _parse_after(raw, field, last, taken, end) if taken else None
        if again is not None:
            return again
    value = wirejson.parse_fast(raw)
    if value is wirejson.EXACT:  # NaN, an integer past 64 bits: the exact reader's, not followed
        return ParsedBody(wirejson.parse_exactly(raw))
    return _located(raw, value, field)


def unread_bytes(raw: bytes, last: ParsedBody | None) -> int:
    """About how many bytes of ``raw`` ``parse_body`` reads after ``last``: those past the
    items of ``last`` it begins with (as most bodies of a conversation do), else all of them.
    A guess made before parsing, from the same comparison ``parse_body`` makes."""
    if last is None or last.items is None or not last.end or len(raw) < FOLLOW_BYTES:
        return len(raw)
    if raw.startswith(memoryview(last.raw)[: last.end]):
        return len(raw) - last.end
    taken = _shared(raw, last)
    return len(raw) - last.ends[taken - 1] if taken and last.ends else len(raw)


def _shared(raw: bytes, last: ParsedBody) -> int:
    """How many of ``last``'s items ``raw`` begins with (0 when their offsets are unknown)."""
    if not last.ends:
        return 0
    head, n = memoryview(last.raw)[: last.end], min(len(raw), last.end)
    same = 0
    while same < n and raw.startswith(head[same : same + _CHUNK], same):
        same += _CHUNK
    if same < n:  # the first byte that differs lies in this chunk: halve it down
        high = min(same + _CHUNK, n)
        while high - same > 1:
            middle = (same + high) // 2
            if raw.startswith(head[same:middle], same):
                same = middle
            else:
                high = middle
    return bisect_right(last.ends, same)


def _parse_after(
    raw: bytes, field: str, last: ParsedBody, taken: int, end: int
) -> ParsedBody | None:
    """``raw`` parsed with ``last``'s first ``taken`` items (which end at ``end``, the same in
    both) taken; None when what follows them is not the rest of the same array and object, or
    needs the exact reader."""
    at = end
    while at < len(raw) and raw[at] in _SPACE:
        at += 1
    comma = raw[at : at + 1] == b","
    if comma:
        at += 1
    elif raw[at : at + 1] != b"]":
        return None
    if last.items is None:
        return None
    split = _same_others(raw, field, last, at)
    if split is None:  # the fields around the history changed: read them
        rest = raw[: last.start] + raw[at:]  # the body without the items taken
        split = _split(rest, last.start, field)
        if split is None:
            return None
        split = (*split[:2], split[2] + len(raw) - len(rest))
    others, new, close = split
    if comma and not new:  # "[..., ]": refused as a full parse refuses it
        return None
    items = [*last.items[:taken], *new]
    others[field] = items  # in its place: the client's order of fields is kept
    ends = last.ends and last.ends[:taken]
    if new:
        end = _before_space(raw, close)
        if last.ends is not None:
            more = _item_ends(raw, at, new)
            ends = None if more is None else [*last.ends[:taken], *more]
    kept, plain = last.translated[:taken], [(p, min(n, taken)) for p, n in last.plain[:1]]
    return ParsedBody(
        others, items, raw, end, last.start, taken, ends, close, kept, last.facts[:taken], plain
    )


def _same_others(
    raw: bytes, field: str, last: ParsedBody, at: int
) -> tuple[dict[str, Any], list[Any], int] | None:
    """When ``raw`` ends with the bytes ``last`` ends with from its history's closing ']' on,
    as an agent's next request does (the same model, tools and settings): ``last``'s other
    fields, the items from ``at`` up to that ']' (parsed alone) and its offset. The body is
    ``last``'s but for the items between its history's first item and that ']', so what they
    are parsed into is all that can differ; None when it is not so (or they are not JSON
    orjson reads as it came)."""
    if not last.close:
        return None
    tail = memoryview(last.raw)[last.close :]
    close = len(raw) - len(tail)
    if close < at or not raw.endswith(tail):
        return None
    if close == at:
        return {**last.value}, [], close
    try:  # at the history's depth in the body, as in _split
        new = orjson.loads(b'{"":[' + memoryview(raw)[at : close + 1] + b"}")[""]
    except orjson.JSONDecodeError:
        return None
    if field != "messages" and wirejson.rounded(new):
        return None
    return {**last.value}, new, close


def _located(raw: bytes, value: Any, field: str) -> ParsedBody:
    """A body parsed whole, with its history located when it is a non-empty top-level array.
    A client that writes JSON as orjson does is located by one comparison an item; any other
    by a second look at the history (and its items' offsets stay unknown)."""
    items = value.get(field) if isinstance(value, dict) else None
    if not isinstance(items, list) or not items:
        return ParsedBody(value)
    start = _history_start(raw, field)
    if start is None:
        return ParsedBody(value)
    ends = _item_ends(raw, start, items)
    if ends is not None and raw[ends[-1] : ends[-1] + 1] == b"]":
        return ParsedBody(value, items, raw, ends[-1], start, 0, ends)
    split = _split(raw, start, field, items)
    if split is None:
        return ParsedBody(value)
    return ParsedBody(value, items, raw, _before_space(raw, split[2]), start, close=split[2])


def _history_start(raw: bytes, field: str) -> int | None:
    """The offset of the first item of the top-level array ``field`` (None: none found). A key
    spelled so cannot lie in a string (its quotes would be escaped); it is the top-level one when
    the bytes before it, closed with one brace, are an object."""
    key = _KEYS.get(field)
    if key is None:
        name = re.escape(field.encode())
        key = _KEYS.setdefault(field, re.compile(rb'"' + name + rb'"[ \t\r\n]*:[ \t\r\n]*\['))
    for n, match in enumerate(key.finditer(raw)):
        if n == _CANDIDATES:
            break
        before = raw[: match.start()].rstrip(_SPACE)
        try:
            if isinstance(orjson.loads(before.removesuffix(b",") + b"}"), dict):
                return match.end()
        except orjson.JSONDecodeError:
            continue
    return None


def _item_ends(raw: bytes, at: int, items: list[Any]) -> list[int] | None:
    """Where each of ``items`` ends, when ``raw`` holds them from ``at`` exactly as orjson
    encodes them, one comma apart (None otherwise)."""
    ends = []
    for n, item in enumerate(items):
        if n:
            if raw[at : at + 1] != b",":
                return None
            at += 1
        try:
            encoded = orjson.dumps(item)
        except TypeError:
            return None
        if not raw.startswith(encoded, at):
            return None
        at += len(encoded)
        ends.append(at)
    return ends


def _split(
    doc: bytes, start: int, field: str, items: list[Any] | None = None
) -> tuple[dict[str, Any], list[Any], int] | None:
    """The object ``doc`` as its fields but ``field``, the items of ``field`` (the array whose
    first item is at ``start``; parsed unless given) and the offset of its closing ']'.
    None when the array is not the field's value (a second key of the same name follows), or
    a part is not JSON orjson reads as it came."""
    close = _array_close(doc, start)
    if close is None:
        return None
    before, after = doc[: start - 1], doc[close + 1 :]
    try:
        if items is None:  # a valid array from start - 1 to close: close is its own bracket
            # read at its depth in the body, where orjson refuses the same nesting
            items = orjson.loads(b'{"":' + doc[start - 1 : close + 1] + b"}")[""]
        # The array's place holds 0, then 1: a second key of the same name would hold its own
        # value both times (the last key is the one a parser keeps).
        others = orjson.loads(before + b"0" + after)
        if not isinstance(others, dict) or others.get(field) != 0:
            return None
        if orjson.loads(before + b"1" + after).get(field) != 1:
            return None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(items, list):
        return None
    checked = [*others.values(), items] if field != "messages" else others.values()
    if any(wirejson.rounded(value) for value in checked):
        return None
    return others, items, close


def _before_space(doc: bytes, at: int) -> int:
    """``at`` moved back past the white space before it."""
    while doc[at - 1] in _SPACE:
        at -= 1
    return at


def _array_close(doc: bytes, start: int) -> int | None:
    """The offset of the ']' that closes the array opening at ``start - 1``, read off orjson's
    complaint about what follows it (a position in characters)."""
    tail = doc[start - 1 :]
    try:
        orjson.loads(tail)
    except orjson.JSONDecodeError as exc:
        chars = exc.pos
    else:
        return None  # the array is the whole rest: no object holds it
    after = chars if tail.isascii() else len(tail.decode(errors="replace")[:chars].encode())
    close = start - 2 + after
    while close >= start and doc[close] in _SPACE:
        close -= 1
    return close if close >= start - 1 and doc[close : close + 1] == b"]" else None
