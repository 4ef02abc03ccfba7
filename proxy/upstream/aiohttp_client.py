"""The provider client on aiohttp: the fastest of the candidates measured (tests/bench/bench_proxy.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator

import aiohttp
from multidict import CIMultiDict

from proxy.config.settings import UpstreamSettings
from proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from proxy.types import RawHeaders
from proxy.upstream.base import Body

# aiohttp adds these unless told not to; the provider must see only what the client sent.
_SKIP_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
# aiohttp drains its buffer once it holds more than this (http_writer.StreamWriter.write): a body
# this small is handed to the socket whole and can never wait on the provider while written.
_PIECE = 1 << 16


def _map_error(exc: BaseException) -> UpstreamError:
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamTimeout("the provider did not answer in time", code="upstream_timeout")
    return UpstreamUnavailable(
        f"the provider could not be reached ({type(exc).__name__})", code="upstream_unavailable"
    )


class AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: RawHeaders = list(response.raw_headers)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _map_error(exc) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _map_error(exc) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()  # an unread body would leave the connection out of step


class _WriteDeadline:
    """``upstream.timeouts.write``, which aiohttp lacks: each piece of a request body must be
    taken by the provider within it.

    aiohttp writes a body in a task of its own and starts its read timeout only once the body is
    written, so a provider that stops reading would hold the request, and a pooled connection,
    for ever. This deadline is entered around the request (it cancels it, as a
    timeout); the body's pieces arm it while aiohttp writes one and disarm it while the next is
    awaited, which on a pass-through is the client's pace, bounded by the server's
    ``body_idle_timeout_seconds``.

    Arming only notes when the piece is due: one timer looks at that when it fires, and
    re-arms itself for a later due time, where rescheduling the timeout twice a piece cost a
    streamed body's relay a few microseconds a piece.
    """

    def __init__(self, write: float, read: float) -> None:
        self._write = write
        self._read = read
        self._loop = asyncio.get_running_loop()
        self.scope: asyncio.Timeout | None = None  # set while the request waits for its answer
        self._due: float | None = None  # loop time the piece being written must be taken by
        self._timer: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float | None) -> None:
        if self.scope is None:  # the answer has come: the deadline has left
            return
        if seconds is None:
            self._due = None
            return
        self._due = self._loop.time() + seconds
        if self._timer is None:
            self._timer = self._loop.call_at(self._due, self._check)

    def _check(self) -> None:
        self._timer = None
        # None: the answer has come (the deadline has left), or the next piece is awaited (its
        # arming starts a timer again).
        if self.scope is None or self._due is None:
            return
        now = self._loop.time()
        if now >= self._due:
            self.scope.reschedule(now)  # expired: the request ends in a timeout
        else:
            self._timer = self._loop.call_at(self._due, self._check)

    def close(self) -> None:
        self.scope = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def pieces(self, body: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        # One generator between aiohttp and the body's own: each piece of a streamed body
        # passes through every layer, and a 600 KB pass-through has a few dozen.
        async for piece in body:
            self._arm(self._write)
            yield piece
            self._arm(None)  # asked for the next piece: the last one was written
        # The last piece may still be draining; aiohttp's read timeout starts once it has, so
        # this only ever ends a final write that never drains.
        self._arm(self._write + self._read)


async def _pieces(body: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(body), _PIECE):
        yield body[start : start + _PIECE]


class AiohttpUpstream:
    def __init__(self, session: aiohttp.ClientSession, *, write: float, read: float) -> None:
        self._session = session
        self._write = write
        self._read = read

    @classmethod
    def from_settings(cls, settings: UpstreamSettings) -> AiohttpUpstream:
        t = settings.timeouts
        connector = aiohttp.TCPConnector(
            limit=settings.max_connections,
            keepalive_timeout=settings.keepalive_seconds,
            ttl_dns_cache=60,
        )
        timeout = aiohttp.ClientTimeout(
            total=None, connect=t.pool + t.connect, sock_connect=t.connect, sock_read=t.read
        )
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            # Once for the session: given with each request, aiohttp merges the two each time.
            skip_auto_headers=_SKIP_AUTO_HEADERS,
        )
        return cls(session, write=t.write, read=t.read)

    async def send(self, method: str, url: str, headers: RawHeaders, body: Body) -> AiohttpResponse:
        request_headers = CIMultiDict(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        )
        if body is None or (isinstance(body, bytes) and len(body) <= _PIECE):
            # Handed to the socket whole (see _PIECE): no piece for a write deadline to bound.
            try:
                response = await self._session.request(
                    method, url, headers=request_headers, data=body, allow_redirects=False
                )
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise _map_error(exc) from exc
            return AiohttpResponse(response)
        deadline = _WriteDeadline(self._write, self._read)
        if isinstance(body, bytes):
            # Sent in pieces (aiohttp would also warn about bytes past 1 MiB), with its length.
            request_headers["Content-Length"] = str(len(body))
            data = deadline.pieces(_pieces(body))
        else:
            data = deadline.pieces(body)
        try:
            async with asyncio.timeout(None) as deadline.scope:
                response = await self._session.request(
                    method, url, headers=request_headers, data=data, allow_redirects=False
                )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _map_error(exc) from exc
        finally:
            deadline.close()
        return AiohttpResponse(response)

    async def aclose(self) -> None:
        await self._session.close()
