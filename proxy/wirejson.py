"""JSON on the request path: parsing client bodies, encoding what the provider receives, and the
canonical bytes that hashes and cache keys are made of.

orjson does the work (several times faster than the standard library on long conversations,
which every compacted request parses and hashes). It refuses a few things a provider accepts, and the standard library takes over for
those, so its speed never costs a request: a lone surrogate (``"\\ud800"``, valid JSON text,
invalid UTF-8 once decoded) and integers beyond 64 bits (which orjson would read as floats).
What neither can take (nesting deeper than about a thousand levels, integers of thousands of
digits, text that is not JSON) is a 400 in OpenAI's error shape, never a RecursionError's 500.

JSON found inside a body (a tool call's ``arguments`` text) or in a provider's answer is read by
``loads_shallow``: its depth is measured without recursion first, and past ``MAX_DEPTH`` it is
unreadable (a ValueError), so no parser, ``str`` or writer ever descends into it.

``NaN``, ``Infinity`` and ``-Infinity`` are not JSON, but Python's ``json.dumps`` writes them by
default (a ``temperature`` a client computed, a schema's bound) and the standard library reads
them. A body holding one goes out as it came: parsed as ``NonFinite`` floats, which orjson
refuses, so the standard library writes the body again with the same tokens (orjson
would write ``null``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest

# Floats this large that are whole numbers may have been integers orjson could not hold.
_EXACT_INT_LIMIT = 2.0**63


class NonFinite(float):
    """``NaN``, ``Infinity`` or ``-Infinity`` as a client wrote it: a float to every reader, and
    written back as the same token (orjson refuses the subclass, the standard library writes
    it)."""

    __slots__ = ()


def _invalid(detail: str) -> InvalidRequest:
    return InvalidRequest(f"the request body is not valid JSON: {detail}", code="invalid_json")


def parse(raw: bytes) -> Any:
    """Parse a client's body; raise InvalidRequest (``invalid_json``) for anything unparsable.

    A rewrite re-encodes every top-level field but ``messages``: when one of them holds a number
    orjson may have rounded, the body is parsed again exactly.
    """
    value = _parse_fast(raw)
    return _parse_exactly(raw) if value is _EXACT else value


_EXACT = object()  # what _parse_fast answers for a body only the standard library reads as sent


def _parse_fast(raw: bytes) -> Any:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _EXACT
    if isinstance(value, dict) and any(_rounded(v) for k, v in value.items() if k != "messages"):
        return _EXACT
    return value


def _parse_exactly(raw: bytes) -> Any:
    try:
        return json.loads(raw, parse_constant=NonFinite)
    except RecursionError as exc:
        raise _invalid("it is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int past the digit limit
        raise _invalid(str(exc)) from exc


def _rounded(value: Any) -> bool:
    """A float in ``value`` that is a whole number past 2**63 (iterative: depth is untrusted)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if abs(item) >= _EXACT_INT_LIMIT and item.is_integer():
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


# --- a conversation's body sent again ---------------------------------------------------------

_SPACE = b" \t\r\n"
# Below this size a body is parsed whole and not followed: finding its history's bytes, or
# parsing only what follows them, costs more than parsing it (measured: even at about 8 KB).
FOLLOW_BYTES = 16 << 10
_CANDIDATES = 8  # keys spelled like the history field looked at for the top-level one
_KEYS: dict[str, re.Pattern[bytes]] = {}


@dataclass(frozen=True, slots=True)
class ParsedBody:
    """A client's body parsed (``value``) and, when its history ``items`` is an array of the
    top-level object, the body's bytes up to the end of the last item (``head``) and where the
    first item begins (``start``): a later body of the conversation that begins with ``head``
    holds these same items first, and only the rest of it is parsed (``parse_body``)."""

    value: Any
    items: list[Any] | None = None  # the history: the very list in ``value``
    head: bytes = b""  # empty: the body cannot be followed
    start: int = 0  # offset of the history's first item (just past its '[')
    reused: int = 0  # items taken as ``last`` held them


def parse_body(raw: bytes, field: str, last: ParsedBody | None = None) -> ParsedBody:
    """``parse(raw)``, knowing where its history (the array ``field``) lies in its bytes.

    ``last`` is the conversation's previous body. Most requests send its history again with
    turns appended: when ``raw`` begins with ``last.head``, those items are taken as they were
    parsed (the same objects) and only what follows them is parsed. The value is the one
    ``parse`` gives for the same bytes, and so is an InvalidRequest.
    """
    if len(raw) < FOLLOW_BYTES:
        return ParsedBody(parse(raw))
    if last is not None and last.head and raw.startswith(last.head):
        again = _parse_after(raw, field, last)
        if again is not None:
            return again
    value = _parse_fast(raw)
    if value is _EXACT:  # NaN, an integer past 64 bits: the exact reader's, not followed
        return ParsedBody(_parse_exactly(raw))
    return _located(raw, value, field)


def _parse_after(raw: bytes, field: str, last: ParsedBody) -> ParsedBody | None:
    """``raw`` (which begins with ``last.head``) parsed with ``last``'s items taken; None when
    what follows them is not the rest of the same array and object, or needs the exact reader."""
    at = len(last.head)
    while at < len(raw) and raw[at] in _SPACE:
        at += 1
    if raw[at : at + 1] == b",":
        at += 1
    elif raw[at : at + 1] != b"]":
        return None
    start = last.start
    rest = raw[:start] + raw[at:]  # the body without the items taken
    split = _split(rest, start, field)
    if split is None or last.items is None:
        return None
    others, new, end = split
    items = [*last.items, *new]
    others[field] = items  # in its place: the client's order of fields is kept
    head = raw[: end + len(raw) - len(rest)] if new else last.head
    return ParsedBody(others, items, head, start, len(last.items))


def _located(raw: bytes, value: Any, field: str) -> ParsedBody:
    """A body parsed whole, with its history located when it is a non-empty top-level array.
    A client that writes JSON as orjson does (compact, UTF-8 as it is: JavaScript's and Rust's
    writers) is located by one comparison; any other by a second look at the history."""
    items = value.get(field) if isinstance(value, dict) else None
    if not isinstance(items, list) or not items:
        return ParsedBody(value)
    start = _history_start(raw, field)
    if start is None:
        return ParsedBody(value)
    end = _encoded_end(raw, start, items)
    if end is None:
        split = _split(raw, start, field, items)
        if split is None:
            return ParsedBody(value)
        end = split[2]
    return ParsedBody(value, items, raw[:end], start)


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


def _encoded_end(raw: bytes, start: int, items: list[Any]) -> int | None:
    """Just past the last item when the history's bytes are exactly orjson's encoding of it."""
    try:
        encoded = orjson.dumps(items)
    except TypeError:
        return None
    return start - 2 + len(encoded) if raw.startswith(encoded, start - 1) else None


def _split(
    doc: bytes, start: int, field: str, items: list[Any] | None = None
) -> tuple[dict[str, Any], list[Any], int] | None:
    """The object ``doc`` as its fields but ``field``, the items of ``field`` (the array whose
    first item is at ``start``; parsed unless given) and the offset just past its last item.
    None when the array is not the field's value (a second key of the same name follows), or
    a part is not JSON orjson reads as it came."""
    close = _array_close(doc, start)
    if close is None:
        return None
    before, after = doc[: start - 1], doc[close + 1 :]
    try:
        if items is None:  # a valid array from start - 1 to close: close is its own bracket
            items = orjson.loads(doc[start - 1 : close + 1])
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
    if any(_rounded(value) for value in checked):
        return None
    end = close
    while doc[end - 1] in _SPACE:
        end -= 1
    return others, items, end


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


def encode(value: Any) -> bytes:
    """Compact JSON bytes, deterministic for the same value (provider prompt caches depend on
    it). Non-ASCII text goes out as UTF-8; a lone surrogate goes out as its ``\\u`` escape."""
    try:
        return orjson.dumps(value)
    except TypeError:  # a lone surrogate, an integer past 64 bits, nesting past orjson's limit,
        return _encode_exactly(value, sort_keys=False)  # a NonFinite


def canonical(value: Any) -> bytes:
    """JSON bytes with sorted keys: the same for any key order a client chose (for hashing)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return _encode_exactly(value, sort_keys=True)


def _encode_exactly(value: Any, *, sort_keys: bool) -> bytes:
    try:
        text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    except RecursionError as exc:
        raise _invalid("it is nested too deeply") from exc
    try:
        return text.encode()
    except UnicodeEncodeError:
        # ensure_ascii escapes every surrogate (and all other non-ASCII) as \uXXXX: valid JSON
        # for the same text, which is what the client itself must have sent.
        return json.dumps(value, sort_keys=sort_keys, separators=(",", ":")).encode()


# How deep a value recall reads of a tool call or a provider's answer may nest: far beyond any
# real arguments, and well within what the standard library's parser and writer, and orjson's
# writer (255 levels, the body around the value included), take without a RecursionError.
MAX_DEPTH = 128
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_INNERMOST = re.compile(rb"\[\]|\{\}")


class TooDeep(ValueError):
    """JSON text nested deeper than allowed (a ValueError: unreadable, like any bad JSON)."""


def loads_shallow(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text that nests at most ``max_depth`` levels, parsed; ValueError for anything else
    (``TooDeep`` past the depth). The depth is measured before any parser descends into it."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") > max_depth and _depth(data, max_depth) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # a lone surrogate, a huge integer: the slower reader
        return json.loads(data.decode("utf-8", "surrogatepass"))


def _depth(data: bytes, limit: int) -> int:
    """How deep ``data``'s brackets nest, up to ``limit + 1`` (no recursion: each pass drops
    the innermost pairs, in C). Brackets that do not pair up count as too deep: no JSON."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", data))
    for depth in range(limit + 1):
        if not brackets:
            return depth
        fewer = _INNERMOST.sub(b"", brackets)
        if len(fewer) == len(brackets):
            return limit + 1
        brackets = fewer
    return limit + 1


def nests_within(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether a parsed value nests at most ``max_depth`` levels (iterative: the value is
    untrusted, and ``str``, ``json.dumps`` and orjson all recurse)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True
