"""The crossing between the route and compaction: the route hands one ``Incoming`` to the call
``Compactor.decide_for`` gave it and gets one ``Decision``: the body to send, the headers to add
to the answer, a ``FollowUp`` with named steps for after the answer, and the ``AnswerStage``s
the forwarder runs on the provider's answer before it is relayed (docs/architecture.md, "The
path of one request").

A stage is one small object with one method, built only for a request whose plan needs it:
the native report, the overflow rescue, the recall rounds. Compaction decides which a request
gets; the route's layer implements them (compaction imports no route), and hands compaction
their constructors (``AnswerStages``) with each request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from proxy.compaction.dialect.translation import Translator
from proxy.compaction.summaries.prefix_summary import ProviderCall
from proxy.state.tenancy import Credentials
from proxy.types import HeaderView, RawHeaders
from proxy.upstream.base import UpstreamResponse

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
    # The stages the route can run on the answer; None: the answer is not relayed by a route
    # (a preview, a bench), so no stage is built.
    stages: AnswerStages | None = None


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
    # Run in order on the answer to this decision (none for a plain request).
    stages: tuple[AnswerStage, ...] = ()
    # Answered by the proxy itself: sent to the client as it is, nothing forwarded.
    reply: LocalReply | None = None


@dataclass
class Answer:
    """The provider's answer being relayed, and the decision it answers (another one after a
    stage sent another request: the plain request after a refusal, an overflow's replacement).
    ``observed``: its follow-up was already shown this answer (an overflow no replacement was
    found for), so it is not shown it again."""

    response: UpstreamResponse
    decision: Decision
    observed: bool = False


# Sends another body upstream with the request's own headers (a retry, a recall round).
Resend = Callable[[bytes], Awaitable[UpstreamResponse]]


class AnswerStage(Protocol):
    """One thing done with the provider's answer before it is relayed. The forwarder runs a
    decision's stages in order, each on the answer the one before gave, and each only on an
    answer whose status it looks at, to a decision that holds it (a replacement's answer is not
    the original's stages' business)."""

    @property
    def statuses(self) -> frozenset[int]:
        """The statuses of a whole answer this stage looks at; it passes every other by."""
        ...

    @property
    def stream_statuses(self) -> frozenset[int]:
        """The same, for a streamed answer."""
        ...

    async def run(self, answer: Answer, resend: Resend) -> Answer:
        """The answer to relay in ``answer``'s place (it, or one built from it)."""
        ...


@dataclass(frozen=True)
class AnswerStages:
    """The stages a route runs, by kind: each makes one request's stage from what compaction
    knows of it. Compaction builds a stage only for a request whose plan needs it."""

    native: Callable[[NativeAttempt], AnswerStage]  # strategy native: refusals, the report
    rescue: Callable[[FollowUp], AnswerStage]  # a context overflow: replaced once, smaller
    recall: Callable[[RecallSession], AnswerStage]  # the model's calls of the recall tool
