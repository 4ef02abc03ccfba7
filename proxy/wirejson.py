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
    value = parse_fast(raw)
    return parse_exactly(raw) if value is EXACT else value


EXACT = object()  # what parse_fast answers for a body only the standard library reads as it came


def parse_fast(raw: bytes) -> Any:
    """The body as orjson reads it, or ``EXACT`` where only the standard library reads it as it
    came (a lone surrogate, a number orjson would round outside ``messages``)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return EXACT
    if isinstance(value, dict) and any(rounded(v) for k, v in value.items() if k != "messages"):
        return EXACT
    return value


def parse_exactly(raw: bytes) -> Any:
    """The body as the standard library reads it (NaN and Infinity kept as ``NonFinite``)."""
    try:
        return json.loads(raw, parse_constant=NonFinite)
    except RecursionError as exc:
        raise _invalid("it is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int past the digit limit
        raise _invalid(str(exc)) from exc


def rounded(value: Any) -> bool:
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
