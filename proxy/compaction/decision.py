"""The crossing between the route and compaction: the route hands one ``Incoming`` to
``Compactor.decide`` and gets one ``Decision``: the body to send, the headers to add to the
answer, and a ``FollowUp`` with named steps for after the answer (docs/architecture.md, "The
request path").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from proxy.compaction.dialect.translation import Translator
from proxy.compaction.summaries.prefix_summary import ProviderCall
from proxy.state.tenancy import Credentials
from proxy.types import HeaderView, RawHeaders

if TYPE_CHECKING:
    from proxy.compaction.recall.tool import RecallSession


class BodySource(Protocol):
    """The client's request body, read whole on first ``read()`` (limits enforced by the reader);
    later calls return the same bytes. Compaction reads it only when it needs the body."""

    async def read(self) -> bytes: ...


@dataclass(frozen=True)
class Incoming:
    """One request to a compacted route, as the route hands it to compaction."""

    headers: HeaderView
    body: BodySource
    dialect: Translator  # translation only: parse, neutral conversation, render
    credentials: Credentials  # the caller's, valid for the provider this request goes to
    streamable: bool  # its body may go out unread (declared length within the limit)
    # Sends a body like this one to the same provider endpoint with the caller's credentials
    # (a summary on the cached prefix, proxy.compaction.summaries.prefix_summary); None: not offered.
    call: ProviderCall | None = None


class FollowUp(Protocol):
    """What compaction does with the provider's answer to a decision (an object with named
    steps, not closures): the route's forwarder calls each at most once, except ``observe``
    (once for an overflow answer, once more for the answer relayed)."""

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        """The provider's answer once it ended (or an overflow answer's error body), decoded."""

    async def replacement(self) -> Decision | None:
        """After a context-overflow answer: the decision to send instead (once), or None. The
        replacement's own follow-up observes its answer; this one then passes its steps on."""

    def answered(self) -> None:
        """The answer (status < 400) was relayed: queue work due after it; must not block."""


class NativeAttempt(Protocol):
    """A request sent with the provider's own context management (``strategy: native``,
    ``proxy.compaction.native.calls``), as the forwarder sees it."""

    @property
    def plain(self) -> Decision:
        """The request without the fields: what is sent once after a refusal."""
        ...

    def refused(self, status: int, decoded: bytes) -> bool:
        """Whether this error answer (decoded) refuses the context-management fields the proxy
        added: ``plain`` is then sent instead."""
        ...

    def retried(self, status: int) -> None:
        """The status ``plain`` was answered with: a success confirms the refusal."""
        ...

    def reported(self, decoded: bytes) -> RawHeaders:
        """The client's response headers for this whole answer (decoded): what it did."""
        ...


@dataclass(frozen=True)
class LocalReply:
    """An answer the proxy gives itself, with nothing sent upstream (an agent's own compaction
    answered from a ready summary, ``proxy.compaction.agents.own_compaction``)."""

    body: bytes
    content_type: bytes = b"application/json"
    status: int = 200


@dataclass(frozen=True)
class Decision:
    """What to send for one request, and what to do after the answer."""

    body: bytes | None  # None: the client's body streams through unread
    response_headers: RawHeaders = field(default_factory=list)  # added to the client's response
    follow_up: FollowUp | None = None
    streaming: bool = False  # the client asked for SSE (an overflow may show inside the stream)
    upstream_headers: RawHeaders = field(default_factory=list)  # set on the request sent
    native: NativeAttempt | None = None
    # The request went out with the recall tool: the forwarder answers its calls.
    recall: RecallSession | None = None
    # Answered by the proxy itself: sent to the client as it is, nothing forwarded.
    reply: LocalReply | None = None
