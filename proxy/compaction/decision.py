"""A client's request as the proxy sees it, whatever its dialect, and the hook where compaction
plugs in (docs/architecture.md, "The request path")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from proxy.state.tenancy import Credentials
from proxy.types import HeaderView, RawHeaders

if TYPE_CHECKING:
    from proxy.dialects.base import Dialect


@dataclass(frozen=True)
class ClientRequest:
    """A client's request to a compacted route. The body is parsed on first use only: a request
    the headers alone send through untouched (``X-Compaction: off``, no conversation) is
    forwarded as the bytes that came, without paying for JSON (issue 9)."""

    raw: bytes  # the body exactly as the client sent it
    headers: RawHeaders  # the client's request headers, as received
    dialect: Dialect
    credentials: Credentials  # the caller's, valid where calls on its behalf go (the route's)

    @cached_property
    def body(self) -> dict[str, Any]:
        """The parsed, checked body (do not mutate: rewrites build a new one); raises
        InvalidRequest for a body every request of the dialect would refuse."""
        return self.dialect.parse(self.raw)


@dataclass(frozen=True)
class Outgoing:
    body: bytes  # what the provider receives
    response_headers: RawHeaders = field(default_factory=list)  # added to the client's response
    # Run once the response has been relayed (schedules ahead-of-time work; must not block).
    after: Callable[[], None] | None = None
    # After a context-overflow answer: the request to send instead (once), or None.
    retry: Callable[[], Awaitable[Outgoing | None]] | None = None
    # Shown the provider's answer once it has ended (status, headers, the end of its body, or
    # the start of an overflow answer's error body; decoded from the provider's content coding):
    # learns windows and calibrates token counts.
    observe: Callable[[int, RawHeaders, bytes], None] | None = None


class Rewriter(Protocol):
    """The compaction hook: turns a client's request into what the provider receives."""

    def untouched(self, headers: RawHeaders) -> RawHeaders | None:
        """When the request headers alone say the body goes out as it came: the headers to add
        to the client's response (the body is then streamed through, never read whole).
        None: the body is read and given to ``rewrite``."""
        ...

    async def rewrite(self, request: ClientRequest) -> Outgoing: ...


# --- The crossing of issue 18 (the route calls ``decide`` once; replaces Outgoing/Rewriter) ----


class BodySource(Protocol):
    """The client's request body, read whole on first ``read()`` (limits enforced by the reader);
    later calls return the same bytes. Compaction reads it only when it needs the body."""

    async def read(self) -> bytes: ...


@dataclass(frozen=True)
class Incoming:
    """One request to a compacted route, as the route hands it to compaction."""

    headers: HeaderView
    body: BodySource
    dialect: Dialect  # translation only: parse, neutral conversation, render, error shape
    credentials: Credentials  # the caller's, valid for the provider this request goes to
    streamable: bool  # its body may go out unread (declared length within the limit)


class FollowUp(Protocol):
    """What compaction does with the provider's answer to a decision (an object with named
    steps, not closures): the route's forwarder calls each at most once."""

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        """The provider's answer once it ended (or an overflow answer's error body), decoded."""

    async def replacement(self) -> Decision | None:
        """After a context-overflow answer: the decision to send instead (once), or None."""

    def answered(self) -> None:
        """The answer (status < 400) was relayed: queue work due after it; must not block."""


@dataclass(frozen=True)
class Decision:
    """What to send for one request, and what to do after the answer."""

    body: bytes | None  # None: the client's body streams through unread
    response_headers: RawHeaders = field(default_factory=list)  # added to the client's response
    follow_up: FollowUp | None = None
    streaming: bool = False  # the client asked for SSE (an overflow may show inside the stream)
