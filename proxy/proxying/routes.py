"""The proxy's ASGI endpoints under /v1: the compacted routes (one per dialect) and every other
path (passed through). Raw ASGI on the hot path: no request/response objects.

A compacted request crosses into compaction once: the route hands it over (``Incoming``) and
gets back a ``Decision`` (the body to send, headers to add, what to do after the answer), which
``forward()`` carries out (docs/architecture.md, "The request path").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from proxy import tracing
from proxy.compaction.decision import AnswerStages, Decision, Incoming
from proxy.config.settings import ServerSettings, UpstreamSettings
from proxy.dialects.base import Dialect
from proxy.errors import ProxyError
from proxy.events import Listeners
from proxy.proxying.body import (
    ClientBody,
    body_too_large,
    declared_length,
    declared_within,
    has_body,
)
from proxy.proxying.events import RequestFinished, RequestRead
from proxy.proxying.forward import Downstream, Upstream, forward
from proxy.proxying.local_reply import send_reply
from proxy.proxying.native_retry import NativeStage
from proxy.proxying.overflow import OverflowRescue
from proxy.proxying.recall.loop import RecallStage
from proxy.proxying.relay import CLIENT_CLOSED, CLOSE, NoticeDisconnect, send_error
from proxy.proxying.resend import Resend
from proxy.proxying.targets import AnthropicTarget, Target
from proxy.server.access_log import Exchange, log_exchange
from proxy.types import HeaderView, Receive, Scope, Send
from proxy.upstream.base import UpstreamClient

# A pass-through request: the client's body (if any) goes out as it comes, nothing added.
PASS_THROUGH = Decision(body=None)


class Compaction(Protocol):
    """Compaction as the routes see it: one call per compacted request, which each route is
    handed once, when it is built (``decide_for`` its label)."""

    def decide_for(self, route: str) -> Callable[[Incoming], Awaitable[Decision]]: ...


@dataclass
class Resources:
    """What the routes share: their settings sections, compaction, the listeners of their
    events, and the upstream client (created in the app's lifespan)."""

    server: ServerSettings
    upstream: UpstreamSettings
    compaction: Compaction
    listeners: Listeners
    client: UpstreamClient | None = None

    def upstream_client(self) -> UpstreamClient:
        assert self.client is not None, "the upstream client is created in the lifespan"
        return self.client


App = Callable[[Scope, Receive, Send], Awaitable[None]]  # an ASGI application


class CompactedFirst:
    """The app's ASGI entry: a request for a compacted route (its exact method and path) goes
    straight to the route; every other request, and the lifespan, to ``app`` (the framework's
    middleware and router, whose layers cost a measurable share of a proxied request's CPU).

    The routes are raw ASGI and answer every error they expect; one they do not reaches the
    server, which logs it and answers a plain-text 500 (or ends a response already started),
    as the framework's error middleware did before it re-raised to the server.
    """

    def __init__(self, app: App, routes: Mapping[tuple[str, str], App]) -> None:
        self._app = app
        self._routes = dict(routes)  # (method, path) -> route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Under a root path the framework's router strips it first: left to it.
        if scope["type"] == "http" and not scope.get("root_path"):
            route = self._routes.get((scope["method"], scope["path"]))
            if route is not None:
                await route(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _Route:
    """A proxied route: records its request in an ``Exchange``, and once it has ended, however
    it ended, tells the listeners and writes the access log's line."""

    resources: Resources
    label: str  # the route label of metrics and logs
    operation = ""  # its GenAI operation (``chat``), if an inference: its span is named so

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange.begin()
        try:
            if tracing.on:
                await self._traced(scope, receive, send, exchange)
            else:
                await self._serve(scope, receive, send, exchange)
        finally:
            upstream_ms = exchange.upstream_ms if exchange.answered else None
            self.resources.listeners.emit(
                RequestFinished(
                    route=self.label,
                    status=exchange.status,
                    upstream_seconds=None if upstream_ms is None else upstream_ms / 1000,
                    cut_off=exchange.cut_off,
                    added_seconds=None if exchange.added_ms is None else exchange.added_ms / 1000,
                )
            )
            log_exchange(scope, exchange)

    async def _traced(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        """``_serve`` inside the request's span (docs/operations.md, "Traces")."""
        with tracing.serve(
            scope["headers"], operation=self.operation, method=scope["method"], route=self.label
        ) as span:
            await self._serve(scope, receive, send, exchange)
            tracing.failed(span, exchange.status)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        raise NotImplementedError


class CompactedRoute(_Route):
    """``POST`` to a compacted route (one per dialect: chat completions, Responses, Anthropic
    Messages): compaction decides what to send, ``forward()`` sends it and relays the answer.

    When the provider answers that the context is too long, compaction may replace the request
    once with a smaller one; the client sees only the second answer.
    """

    def __init__(self, resources: Resources, dialect: Dialect, target: Target) -> None:
        self.resources = resources
        self.dialect = dialect
        self.target = target
        self.label = dialect.name
        self.operation = "chat"
        self._decide = resources.compaction.decide_for(self.label)
        # What this route can do with an answer; compaction picks what each request needs.
        self.stages = AnswerStages(
            native=NativeStage,
            rescue=partial(OverflowRescue, hold_seconds=resources.upstream.stream_hold_seconds),
            recall=RecallStage,
        )

    async def _serve(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        res, dialect = self.resources, self.dialect
        headers = HeaderView.of(scope["headers"])
        target = self.target.resolve(headers)
        if tracing.on:
            provider = "anthropic" if isinstance(target, AnthropicTarget) else "openai"
            tracing.annotate({"gen_ai.provider.name": provider})
        limit = res.server.max_body_bytes
        notice = NoticeDisconnect(receive)
        try:
            body = ClientBody(
                receive, headers, limit=limit, exchange=exchange, after_read=notice.watch
            )
            # Only the dialects whose bodies make transcripts are recorded, and only when asked.
            recording = dialect.records and res.listeners.wants(RequestRead)
            try:
                url = target.url(scope)
                incoming = Incoming(
                    headers=headers,
                    body=body,
                    dialect=dialect,
                    credentials=target.caller_credentials(headers),
                    # A body compaction leaves alone streams through unread, unless it is recorded.
                    streamable=declared_within(headers, limit) and not recording,
                    call=Resend(res.upstream_client(), url, target, headers),
                    stages=self.stages,
                )
                if recording:
                    res.listeners.emit(RequestRead(headers, await body.read(), dialect))
                decision = await self._decide(incoming)
                if notice.gone:  # nothing sent for a client that has left
                    exchange.status = CLIENT_CLOSED
                    return
            except ProxyError as error:
                await send_error(send, error, exchange, body=dialect.error_body(error))
                return
            except ConnectionResetError:
                exchange.status = CLIENT_CLOSED
                return
            if decision.reply is not None:  # answered by the proxy itself: nothing goes upstream
                await send_reply(
                    send, decision.reply, exchange, extra_headers=decision.response_headers
                )
                return
            if decision.body is None and body.was_read:
                # Read already (compaction looked, and sends it as it came): it cannot stream again.
                decision = replace(decision, body=await body.read())
            # A body read whole goes out with the length the upstream client gives it.
            sent_headers = target.headers(headers, drop_content_length=decision.body is not None)
            await forward(
                Upstream(res.upstream_client(), "POST", url, sent_headers),
                decision,
                Downstream(
                    receive, send, exchange, limit, dialect.name, dialect.error_body, notice=notice
                ),
            )
        finally:
            # The watcher forward took over is stopped there; every other way out, here.
            notice.stop()


class PassThrough(_Route):
    """Every other method and path under /v1: bodies streamed both ways, nothing changed.
    ``target``: whose URL, auth and error shape (OpenAI's; Anthropic's for count_tokens, and for
    any request carrying ``anthropic-version``: the anthropic SDK's models, files, batches)."""

    def __init__(self, resources: Resources, target: Target) -> None:
        self.resources = resources
        self.target = target
        self.label = "passthrough"

    async def _serve(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        res = self.resources
        headers = HeaderView.of(scope["headers"])
        target = self.target.resolve(headers)
        try:
            url = target.url(scope)
        except ProxyError as error:
            await send_error(send, error, exchange, body=target.error_body(error))
            return
        limit = res.server.max_body_bytes
        if declared_length(headers) > limit:
            # Refused on the head alone: not one byte of it reaches the provider.
            too_large = body_too_large(limit)
            await send_error(
                send, too_large, exchange, extra_headers=CLOSE, body=target.error_body(too_large)
            )
            return
        await forward(
            Upstream(res.upstream_client(), scope["method"], url, target.headers(headers)),
            PASS_THROUGH,
            Downstream(
                receive,
                send,
                exchange,
                limit,
                "passthrough",
                target.error_body,
                has_body=has_body(headers),
            ),
        )
