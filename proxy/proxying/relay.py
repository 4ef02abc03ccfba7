"""Relaying to the client: a response as it arrives, an error of ours, and disconnects.

A response is relayed chunk by chunk as the provider sends it (SSE chunks are never buffered or
re-encoded). A client that disconnects cancels the upstream request: a watcher task waits for
``http.disconnect`` and cancels the task doing the forwarding, which closes the provider connection.
A client that disconnects while its request is being decided on gets nothing sent upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from types import TracebackType

from proxy.errors import ProxyError
from proxy.proxying.headers import response_headers_downstream
from proxy.server.access_log import Exchange
from proxy.types import RawHeaders, Receive, Send
from proxy.upstream.base import UpstreamResponse

# Sent with an error that leaves part of the request unread: the client must not reuse the
# connection (its unread bytes would be taken for the next request).
CLOSE: RawHeaders = [(b"connection", b"close")]

CLIENT_CLOSED = 499  # logged when the client went away before a response was sent to it


class ClientGone(ConnectionResetError):
    """The client disconnected before its request body was complete."""


class CancelOnDisconnect:
    """Cancel the current task when the client disconnects; swallow only that cancellation.

    Call ``watch()`` once the request body has been read (the watcher and a body reader must
    not both call ``receive``); entering with ``watch_now=True`` does that at once. ``notice``:
    the request's ``NoticeDisconnect``, whose watcher, if it has one, is taken over rather than
    a second one started (a task and its cancellation are a measurable share of a request).
    """

    def __init__(
        self, receive: Receive, *, watch_now: bool = True, notice: NoticeDisconnect | None = None
    ) -> None:
        self._receive = receive
        self._watch_now = watch_now
        self._notice = notice
        self._task: asyncio.Task[object] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.disconnected = False
        self.refused: ProxyError | None = None

    async def __aenter__(self) -> CancelOnDisconnect:
        self._task = asyncio.current_task()
        if self._watch_now:
            self.watch()
        return self

    def watch(self) -> None:
        if self._watcher is None:
            notice = self._notice
            taken = None if notice is None else notice.hand_over(self.client_gone)
            self._watcher = taken or asyncio.create_task(self._wait_for_disconnect())

    def client_gone(self) -> None:
        """The client went away: abort the forwarding.

        Called by the watcher, or from the request body's iterator. When the upstream client
        runs the iterator in a task of its own (aiohttp), an exception there would only fail
        the upload, so the forwarding task is cancelled; when it runs it in the forwarding task
        (httpx), the exception the iterator raises unwinds it (cancelling too would leave
        httpcore's connection open and its pool slot taken, the provider waiting for the rest
        of the body).
        """
        if not self.disconnected and self._task is not None:
            self.disconnected = True
            if asyncio.current_task() is not self._task:
                self._task.cancel()

    def refuse(self, error: ProxyError) -> None:
        """Abort the forwarding, keeping ``error`` to answer the client (from the request
        body's iterator, as ``client_gone``)."""
        if self.refused is None:
            self.refused = error
            if asyncio.current_task() is not self._task:
                self.client_gone()

    async def _wait_for_disconnect(self) -> None:
        await _disconnected(self._receive)
        self.client_gone()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._watcher is not None:
            self._watcher.cancel()
        if not self.disconnected:
            return False
        if exc_type is asyncio.CancelledError:
            assert self._task is not None
            self._task.uncancel()
            return True
        return exc_type is ClientGone  # raised by the body's iterator in the forwarding task


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone; call it only once the request body has been read (then
    ``http.disconnect`` is the only message left, or an empty ``http.request`` after a watcher
    was cancelled mid-receive)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class NoticeDisconnect:
    """Notes that the client went away (``gone``), without stopping the work under way.

    Used while compaction decides on a request: an inline summary started for it is let finish
    and stored (the client's retry uses it instead of paying for another), but a client gone by
    then gets nothing sent upstream, where it would be billed for an answer nobody reads.
    Call ``watch()`` once the request body has been read (the watcher and a body
    reader must not both call ``receive``); a request whose body is never read is not watched.
    """

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._watcher: asyncio.Task[None] | None = None
        self._then: Callable[[], None] | None = None
        self.gone = False

    def watch(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        await _disconnected(self._receive)
        self.gone = True
        if self._then is not None:
            self._then()

    def hand_over(self, then: Callable[[], None]) -> asyncio.Task[None] | None:
        """The watcher, for a ``CancelOnDisconnect`` to cancel when it is done, a disconnect from
        now on also calling ``then``; None when not watching (or gone already: ``gone`` was
        checked with nothing awaited since, so that cannot be while the request goes on)."""
        watcher = self._watcher
        if watcher is None or watcher.done():
            return None
        self._then = then
        return watcher

    def stop(self) -> None:
        """Stop watching (a plain call, not an async context: this is on every request's path).
        Harmless once handed over: the new owner cancels the same watcher."""
        if self._watcher is not None:
            self._watcher.cancel()


async def send_error(
    send: Send,
    error: ProxyError,
    exchange: Exchange,
    *,
    body: bytes,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with an error of ours, ``body`` in the route's shape, recording it in ``exchange``."""
    exchange.status = error.status_code
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra_headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
    exchange.bytes_out = len(body)


async def relay(
    response: UpstreamResponse,
    send: Send,
    exchange: Exchange,
    *,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
    whole: bytes | None = None,
) -> None:
    """Send the provider's status, headers and body to the client as they arrive, counting in
    ``exchange`` what was sent (so a relay cut short is still counted right). ``whole``: the
    body, when it was read whole already, sent in one message (not the body, then its end).

    An upstream error mid-body propagates: once headers are out the only honest signal left is
    to abort the client's connection.
    """
    headers = response_headers_downstream(response.headers)
    headers.extend(extra_headers)
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    exchange.status, exchange.responded = response.status, True
    if whole is not None:
        await send({"type": "http.response.body", "body": whole})
        exchange.bytes_out += len(whole)
        return
    async for chunk in response.iter_raw():
        if chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            exchange.bytes_out += len(chunk)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
