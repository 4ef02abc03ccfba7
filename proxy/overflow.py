"""Recognising a provider's "your prompt is too long" answer, and holding a response back just
long enough to look at it.

Providers say it differently: OpenAI answers 400 with code ``context_length_exceeded``; vLLM,
llama.cpp and others put it in the message; llama-cpp-python's server answers an overflowing
*streamed* request with 200 and an empty body; OpenAI's Responses API may answer a streamed
request with 200, its opening events and then a ``response.failed`` event carrying
``context_length_exceeded`` (docs/dialects.md). Only a request the proxy can still compact harder
is held back, and only until its first event that is not a stream's opening (or, for a 400, the
first ``ERROR_PREFIX_BYTES`` of its error body: enough to recognise an overflow, and all a client
can make us hold, since a longer body is relayed as it arrives, prefix first, never buffered
whole).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from proxy.upstream.base import RawHeaders, UpstreamResponse

_OVERFLOW = re.compile(
    rb"context_length_exceeded|maximum context length|context (?:window|size|length)"
    rb"|too many tokens|exceeds? the (?:available )?context|prompt is too long",
    re.IGNORECASE,
)
# Overflow messages are a sentence near the start of a small JSON body; 50 slow clients with
# unbounded reads of large error bodies held +587 MB (issue 9).
ERROR_PREFIX_BYTES = 64 * 1024


# The events a Responses stream opens with, before the model's first output or a failure.
_OPENING = frozenset({b"response.created", b"response.in_progress", b"response.queued"})
_FAILED = frozenset({b"response.failed", b"error"})
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_TYPE = re.compile(rb'"type"\s*:\s*"([^"]*)"')


def is_overflow_error(status: int, body: bytes) -> bool:
    return status in (400, 413, 422) and bool(_OVERFLOW.search(body[:ERROR_PREFIX_BYTES]))


def _stream_verdict(prefix: bytes) -> bool | None:
    """Whether a streamed 200 is an overflow, from its first event that is not an opening one;
    None while there is none yet (and the prefix is still small enough to hold)."""
    for event in _EVENT_END.split(prefix)[:-1]:  # the complete events
        name, data = _event(event)
        if name not in _OPENING:
            return name in _FAILED and _failure_is_overflow(name, data)
    return None if len(prefix) < ERROR_PREFIX_BYTES else False


def _event(event: bytes) -> tuple[bytes, bytes]:
    """(name, data) of one SSE event; the name from its ``event:`` line, else its data's type."""
    name, data = b"", []
    for line in event.splitlines():
        field, _, value = line.partition(b":")
        if field == b"event":
            name = value.strip()
        elif field == b"data":
            data.append(value.strip())
    joined = b"\n".join(data)
    if not name:
        found = _TYPE.search(joined[:200])
        name = found.group(1) if found else b""
    return name, joined


def _failure_is_overflow(name: bytes, data: bytes) -> bool:
    """The failure's error (``response.error``, or the ``error`` event itself) says the input is
    too long; the rest of the event (the echoed instructions, say) is not read."""
    try:
        event = json.loads(data)
        error = event["response"]["error"] if name == b"response.failed" else event
        text = f"{error.get('code')} {error.get('message')}"
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return bool(_OVERFLOW.search(text.encode()))


class BufferedResponse:
    """A response whose (small) body was already read."""

    def __init__(self, status: int, headers: RawHeaders, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    async def iter_raw(self) -> AsyncIterator[bytes]:
        yield self._body

    async def read(self) -> bytes:
        return self._body

    async def aclose(self) -> None:
        return None


class PrefixedResponse:
    """A streaming response whose first chunk was read ahead: it is sent first, then the rest."""

    def __init__(
        self, response: UpstreamResponse, first: bytes, rest: AsyncIterator[bytes]
    ) -> None:
        self.status = response.status
        self.headers = response.headers
        self._response = response
        self._first = first
        self._rest = rest

    async def iter_raw(self) -> AsyncIterator[bytes]:
        yield self._first
        async for chunk in self._rest:
            yield chunk

    async def read(self) -> bytes:
        return self._first + b"".join([chunk async for chunk in self._rest])

    async def aclose(self) -> None:
        await self._response.aclose()


async def look_for_overflow(
    response: UpstreamResponse, *, streaming: bool
) -> tuple[bool, UpstreamResponse]:
    """(overflowed, the response to relay instead of ``response`` if it did not)."""
    if response.status in (400, 413, 422):
        chunks = response.iter_raw()
        prefix = b""
        async for chunk in chunks:
            prefix += chunk
            if len(prefix) >= ERROR_PREFIX_BYTES:
                overflowed = is_overflow_error(response.status, prefix)
                return overflowed, PrefixedResponse(response, prefix, chunks)
        await response.aclose()
        return is_overflow_error(response.status, prefix), BufferedResponse(
            response.status, response.headers, prefix
        )
    if streaming and response.status == 200:
        chunks = response.iter_raw()
        prefix = b""
        async for chunk in chunks:
            prefix += chunk
            verdict = _stream_verdict(prefix) if prefix else None
            if verdict is not None:
                return verdict, PrefixedResponse(response, prefix, chunks)
        await response.aclose()
        # An empty answer to a streamed request is an overflow (llama-cpp-python).
        return not prefix, BufferedResponse(response.status, response.headers, prefix)
    return False, response
