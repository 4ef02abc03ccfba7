"""Bounds on what one client can make the proxy hold: a deadline for a request's headers, a cap
on their size, a cap on open connections, and an idle timeout inside a request body.

uvicorn bounds none of these by itself: a connection that sends nothing, or a header byte a
second, is held for ever (it arms its keep-alive timer only after a response); httptools has no
header size limit (a 128 MB header is concatenated piece by piece, stalling every client);
``limit_concurrency`` answers 503 only once a request's headers are complete, so slow clients
still pile up until accept() fails for lack of file descriptors. So the proxy runs uvicorn with
``GuardedHTTP`` as its ``http`` protocol: uvicorn's own HTTP implementation (httptools, or h11
without it), watched from outside through the asyncio protocol calls (connection made, data
received, connection lost), so the request path itself pays nothing for it.

What cannot be bounded here (a body that trickles just under the idle timeout, TLS, per-client
rates) belongs to a front proxy: deploy/nginx.conf has the settings.
"""

from __future__ import annotations

import asyncio
import http
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from proxy.errors import HeadersTooLarge, InvalidRequest, Overloaded, ProxyError, RequestTimeout

if TYPE_CHECKING:
    from uvicorn.server import Protocols  # uvicorn defines it for type checkers only

logger = logging.getLogger("proxy.limits")

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # uvicorn without httptools: h11 serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


# The longest request line: httptools and h11 both refuse a request target past 64 KiB with a
# plain-text 400 of their own, whatever server.max_header_bytes allows; ours is the JSON 431.
MAX_REQUEST_LINE = 65535


class BurstLog:
    """One warning for a burst of events, not one per event: the first at once, then, while
    events go on, one line every ``interval`` seconds with how many there were (a flood of
    refused connections must not become a flood of log lines). Used on the event loop only."""

    def __init__(self, message: str, *, interval: float = 10.0) -> None:
        self.message = message
        self.interval = interval
        self._count = 0
        self._timer: asyncio.TimerHandle | None = None

    def note(self) -> None:
        if self._timer is None:  # the first of a burst
            logger.warning("%s", self.message)
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)
        else:
            self._count += 1

    def _flush(self) -> None:
        self._timer = None
        if self._count:
            logger.warning("%s: %d more in the last %g s", self.message, self._count, self.interval)
            self._count = 0
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)


def raw_response(error: ProxyError) -> bytes:
    """A complete HTTP/1.1 error response that closes the connection, written to the socket
    directly: it answers a client whose request was never complete enough for the app."""
    body = error.to_body()
    phrase = http.HTTPStatus(error.status_code).phrase
    head = (
        f"HTTP/1.1 {error.status_code} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Limits:
    """The limits of one server process, and the logs they share across its connections."""

    header_timeout: float
    body_idle_timeout: float
    max_header_bytes: int
    max_connections: int
    refused: BurstLog = field(
        default_factory=lambda: BurstLog("connections refused: server.max_connections reached")
    )
    slow: BurstLog = field(
        default_factory=lambda: BurstLog(
            "connections closed: headers or body slower than server.header_timeout_seconds / "
            "server.body_idle_timeout_seconds"
        )
    )
    too_large: BurstLog = field(
        default_factory=lambda: BurstLog("requests refused: headers over server.max_header_bytes")
    )


class _Guard:
    """Mixed in before one of uvicorn's HTTP protocol classes (see ``GuardedHTTP``).

    It uses only what both implementations share: ``connections``, ``transport``, ``flow`` and
    ``cycle`` (a new cycle object is made when a request's headers are complete; its
    ``more_body`` turns False when the body is complete, after which the next bytes are the
    head of the next request; ``response_started`` says whether the app has answered).

    The common request, head and body in one read, arms no timer (one costs a few
    microseconds): the header deadline is armed when a connection opens and when a read leaves
    a head incomplete, the body idle timer when a read leaves a body incomplete.
    """

    connections: set[Protocols]
    transport: asyncio.Transport
    flow: Any
    cycle: Any
    loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._refused = False
        self._head_cycle: Any = None  # the cycle current when the head being read began
        self._head_bytes = 0  # of the head being read, in earlier reads
        self._head_tail = b""  # the last bytes of those reads: a CRLF may straddle two reads
        self._line_ended = False  # the request line's CRLF was in those reads
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_seen = 0.0  # loop time of the last body bytes

    def connection_made(self, transport: asyncio.Transport) -> None:
        if len(self.connections) >= self.limits.max_connections:
            # Refused at once, before a byte is read: a flood of clients must cost each one a
            # file descriptor for an instant, not until it gives up.
            self._refused = True
            self.limits.refused.note()
            transport.write(OVERLOADED)
            transport.close()
            return
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_head()  # uvicorn arms nothing until a first response: a silent client

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return  # uvicorn never saw this connection
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        reading_head = before is None or not before.more_body
        if reading_head and self._head_too_large(data):
            # Judged before the parser sees the bytes: a head that arrives whole in one read
            # would be parsed however large, and a request line past 64 KiB is the parsers'
            # own plain-text 400.
            self.limits.too_large.note()
            self._close_with(HEADERS_TOO_LARGE)
            return
        super().data_received(data)  # type: ignore[misc]
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not before:  # a head was completed by this read
            self._disarm_head()
            self._new_head()
        elif reading_head:
            if self._head_timer is None:
                self._arm_head()
            self._line_ended = self._line_ended or b"\n" in self._head_tail + data
            self._head_bytes += len(data)
            self._head_tail = data[-3:]
            return
        if cycle is not None and cycle.more_body and not cycle.response_complete:
            self._body_seen = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(
                    self.limits.body_idle_timeout, self._body_check
                )

    def _head_too_large(self, data: bytes) -> bool:
        """Whether the head being read, with ``data``, passes ``max_header_bytes`` (request line
        and headers up to the blank line) or has a request line over ``MAX_REQUEST_LINE``.

        The common read (a whole small request) is one comparison; a read that could pass a
        limit is searched for the head's end, which a request with a body finds at once.
        """
        seen = self._head_bytes + len(data)
        line_limit = MAX_REQUEST_LINE if not self._line_ended else seen
        if seen <= self.limits.max_header_bytes and seen <= line_limit:
            return False
        window = self._head_tail + data
        offset = self._head_bytes - len(self._head_tail)  # of ``window`` in the head
        end = window.find(b"\r\n\r\n")
        head = seen if end < 0 else offset + end + 4
        if head > self.limits.max_header_bytes:
            return True
        if self._line_ended:
            return False
        line_end = window.find(b"\n")
        return (head if line_end < 0 else offset + line_end) > MAX_REQUEST_LINE

    def _new_head(self) -> None:
        self._head_bytes = 0
        self._head_tail = b""
        self._line_ended = False

    def _arm_head(self) -> None:
        self._head_cycle = self.cycle
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_late)

    def _disarm_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _disarm(self) -> None:
        self._disarm_head()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self.cycle is self._head_cycle:
            self.limits.slow.note()
            self._close_with(HEADER_TIMEOUT)

    def _body_check(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or not cycle.more_body or cycle.response_complete:
            return
        idle = self.loop.time() - self._body_seen
        if self.flow.read_paused:  # the app is slow to take the body, not the client to send it
            idle, self._body_seen = 0.0, self.loop.time()
        if idle < self.limits.body_idle_timeout:
            wait = self.limits.body_idle_timeout - idle
            self._body_timer = self.loop.call_later(wait, self._body_check)
            return
        self.limits.slow.note()
        if cycle.response_started:
            self.transport.close()  # too late for a status: end the connection unfinished
        else:
            # Closing makes uvicorn hand the app an http.disconnect: a chat body is never
            # complete, a pass-through upload is aborted, nothing reaches the provider.
            self._close_with(BODY_TIMEOUT)

    def send_400_response(self, msg: str) -> None:
        # Called by either parser for a request it cannot read (a control character in a
        # header value, a malformed request line): its own answer is plain text, ours is the
        # JSON error shape every other refusal has (uvicorn has logged it already).
        self._close_with(MALFORMED)

    def _close_with(self, response: bytes) -> None:
        self._disarm()
        self.transport.write(response)
        self.transport.close()


OVERLOADED = raw_response(
    Overloaded("the proxy has too many open connections; retry later", code="overloaded")
)
HEADERS_TOO_LARGE = raw_response(
    HeadersTooLarge("the request line or headers are too large", code="headers_too_large")
)
HEADER_TIMEOUT = raw_response(
    RequestTimeout("the request headers were not received in time", code="request_timeout")
)
MALFORMED = raw_response(
    InvalidRequest(
        "the request could not be parsed as HTTP/1.1 (a header name or value with a "
        "character HTTP does not allow, or a malformed request line)",
        code="malformed_request",
    )
)
BODY_TIMEOUT = raw_response(
    RequestTimeout("the request body was not received in time", code="request_timeout")
)


# uvicorn's protocols take an asyncio.Transport in connection_made where asyncio declares a
# BaseTransport (uvicorn silences that on its own classes); the guard takes what uvicorn does.
class GuardedH11(_Guard, H11Protocol):  # type: ignore[misc]
    pass


if HttpToolsProtocol is not None:

    class GuardedHttpTools(_Guard, HttpToolsProtocol):  # type: ignore[misc]  # as GuardedH11
        pass


@dataclass
class GuardedHTTP:
    """uvicorn's ``http`` option: a protocol factory (uvicorn calls it with ``config``,
    ``server_state``, ``app_state`` and ``_loop`` for each connection). A plain dataclass, so
    it pickles to the worker processes of ``serve --workers N``; each worker has its own."""

    limits: Limits
    implementation: str = "auto"  # "auto" (httptools if installed), "httptools" or "h11"

    def __call__(self, **kwargs: Any) -> asyncio.Protocol:
        if self.implementation == "h11" or HttpToolsProtocol is None:
            return GuardedH11(limits=self.limits, **kwargs)
        return GuardedHttpTools(limits=self.limits, **kwargs)
