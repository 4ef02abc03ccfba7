"""The client's request body, with ``server.max_body_bytes`` enforced: read whole once (what
compaction reads) or streamed through as it arrives (what compaction leaves alone, and every
pass-through route). A body past the limit is refused without reading it all."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from proxy.errors import PayloadTooLarge
from proxy.proxying.relay import CancelOnDisconnect, ClientGone
from proxy.server.access_log import Exchange
from proxy.types import HeaderView, Receive


def body_too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"the request body exceeds {limit} bytes", code="body_too_large")


def declared_length(headers: HeaderView) -> int:
    """The Content-Length the client declared (0 when it declared none)."""
    value = headers.get("content-length") or ""
    return int(value) if value.isdigit() else 0


def declared_within(headers: HeaderView, limit: int) -> bool:
    """The body's length is declared and within ``limit`` (the server holds the client to it),
    so it may stream through; otherwise it is read whole, where the limit is enforced."""
    value = headers.get("content-length")
    return value is not None and value.isdigit() and int(value) <= limit


def has_body(headers: HeaderView) -> bool:
    """The request carries a body (a non-zero Content-Length, or a chunked one)."""
    length = headers.get("content-length")
    if length is not None:
        return length != "0"
    return "transfer-encoding" in headers


class ClientBody:
    """The client's body read whole on the first ``read()``, later calls returning the same
    bytes (``proxy.compaction.decision.BodySource``). ``after_read`` runs once it has been
    read: from then on ``http.disconnect`` is the only message left to receive."""

    def __init__(
        self,
        receive: Receive,
        headers: HeaderView,
        *,
        limit: int,
        exchange: Exchange,
        after_read: Callable[[], None],
    ) -> None:
        self._receive = receive
        self._headers = headers
        self._limit = limit
        self._exchange = exchange
        self._after_read = after_read
        self._body: bytes | None = None

    @property
    def was_read(self) -> bool:
        return self._body is not None

    async def read(self) -> bytes:
        if self._body is None:
            self._body = await self._read()
            self._exchange.bytes_in = len(self._body)
            self._after_read()
        return self._body

    async def _read(self) -> bytes:
        limit = self._limit
        if declared_length(self._headers) > limit:
            raise body_too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the client disconnected during the request body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise body_too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def stream_request_body(
    receive: Receive, guard: CancelOnDisconnect, exchange: Exchange, *, limit: int
) -> AsyncIterator[bytes]:
    """The client's request body, chunk by chunk, as it arrives.

    A body that grows past ``limit`` (chunked, or longer than announced) aborts the upstream
    request: the provider sees an unfinished upload, never a truncated one as complete.
    """
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            # Never end the body early: a truncated body could reach the provider as complete.
            guard.client_gone()
            raise ClientGone("the client disconnected during the request body")
        chunk = message.get("body", b"")
        if chunk:
            exchange.bytes_in += len(chunk)
            if exchange.bytes_in > limit:
                error = body_too_large(limit)
                guard.refuse(error)
                raise error
            yield chunk
        if not message.get("more_body", False):
            guard.watch()
            return
