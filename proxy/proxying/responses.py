"""Upstream responses as the forwarder relays them, wrapped without changing a byte: one whose
small body was read already, one whose first bytes were read ahead (overflow.py holds an answer
back to look at it), and one that keeps the end of its body for compaction's follow-up (the
usage a calibration reads sits at the end of a JSON body, and in the last SSE events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder

TAIL_BYTES = 8192
# An Anthropic stream states its input and cache figures in its first event (message_start),
# which a long answer pushes out of the tail: its head is kept too.
HEAD_BYTES = 4096


class BufferedResponse:
    """A response whose (small) body was already read (``body``)."""

    def __init__(self, status: int, headers: RawHeaders, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    async def iter_raw(self) -> AsyncIterator[bytes]:
        yield self.body

    async def read(self) -> bytes:
        return self.body

    async def aclose(self) -> None:
        return None


class PrefixedResponse:
    """A streaming response whose first bytes were read ahead: they are sent first, then the
    rest. ``pending``: the read of the next chunk, already under way when the hold ended."""

    def __init__(
        self,
        response: UpstreamResponse,
        first: bytes,
        rest: AsyncIterator[bytes],
        *,
        pending: asyncio.Future[bytes | None] | None = None,
    ) -> None:
        self.status = response.status
        self.headers = response.headers
        self._response = response
        self._first = first
        self._rest = rest
        self._pending = pending

    async def iter_raw(self) -> AsyncIterator[bytes]:
        yield self._first
        if self._pending is not None:
            chunk = await self._pending
            if chunk is None:
                return
            yield chunk
        async for chunk in self._rest:
            yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        drop_pending(self._pending)
        await self._response.aclose()


def drop_pending(pending: asyncio.Future[bytes | None] | None) -> None:
    """Stop a read nobody will wait for; an error it ended with is not reported again."""
    if pending is None:
        return
    if not pending.done():
        pending.cancel()
    elif not pending.cancelled():
        pending.exception()


class ResponseTail:
    """An upstream response relayed as it is, keeping the last ``TAIL_BYTES`` of its decoded body
    (proxy/upstream/content_coding.py: providers compress their answers), and its first
    ``HEAD_BYTES``, for a look once it has ended."""

    def __init__(self, response: UpstreamResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        self._tail = bytearray()
        self._head = b""
        self._seen = 0  # decoded bytes so far
        # Decoding every byte is the price of reading a compressed tail; it is cheap next to
        # relaying it, and only compacted requests pay it.
        self._decoder = Decoder.of(response.headers)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.iter_raw():
            if chunk and self._decoder.readable:
                self._keep(self._decoder.decode(chunk))
            yield chunk

    def keep_whole(self, body: bytes) -> None:
        """Keep ``body``, the response's whole body read already, as ``iter_raw`` would have
        (the relay sends such a body without iterating)."""
        if body and self._decoder.readable:
            self._keep(self._decoder.decode(body))

    def _keep(self, chunk: bytes) -> None:
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]
        self._seen += len(chunk)
        self._tail += chunk
        if len(self._tail) > 2 * TAIL_BYTES:
            del self._tail[:-TAIL_BYTES]

    async def read(self) -> bytes:
        return await self._response.read()

    async def aclose(self) -> None:
        await self._response.aclose()

    def tail(self) -> bytes:
        """The decoded body's end, after its head when the two do not overlap (the bytes
        between them left out)."""
        if not self._decoder.readable:
            return b""
        tail = bytes(self._tail[-TAIL_BYTES:])
        before = self._seen - len(tail)  # decoded bytes before the tail
        if before <= 0:
            return tail
        return self._head[:before] + (b"\n\n" if before > len(self._head) else b"") + tail
