"""The proxy's ASGI endpoints: the compacted routes (one per dialect), everything else under /v1
(passed through), and one ``forward()`` that sends upstream and relays the answer for both. Raw ASGI on the hot path: no request/response objects."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.compaction.calibration import ResponseTail
from proxy.compaction.decision import ClientRequest, Outgoing, Rewriter
from proxy.config.settings import Settings
from proxy.dialects.base import Dialect
from proxy.errors import PayloadTooLarge, ProxyError, UpstreamError
from proxy.ops.metrics import Metrics
from proxy.ops.recorder import Recorder
from proxy.proxying.overflow import look_for_overflow
from proxy.proxying.relay import (
    CLIENT_CLOSED,
    CLOSE,
    CancelOnDisconnect,
    Exchange,
    NoticeDisconnect,
    body_too_large,
    relay,
    send_error,
    stream_request_body,
)
from proxy.proxying.targets import Target
from proxy.server.abort import cut_off, was_cut_off
from proxy.server.access_log import log_request
from proxy.types import HeaderView, RawHeaders, Receive, Scope, Send
from proxy.upstream.base import UpstreamClient, UpstreamResponse
from proxy.upstream.content_coding import readable_accept_encoding


@dataclass
class Resources:
    """What the endpoints share; the upstream client is created in the app's lifespan."""

    settings: Settings
    rewriter: Rewriter
    metrics: Metrics = field(default_factory=Metrics)
    upstream: UpstreamClient | None = None
    recorder: Recorder | None = None  # record.path: opt-in, writes message content to disk

    def finish(self, route: str, scope: Scope, exchange: Exchange, started: float) -> None:
        """Count and log one request once it has ended, as it went."""
        self.metrics.child(self.metrics.requests, route, str(exchange.status)).inc()
        if was_cut_off():
            self.metrics.child(self.metrics.upstream_failures, route, "mid_response").inc()
        if exchange.answered and exchange.upstream_ms is not None:
            latency = exchange.upstream_ms / 1000
            self.metrics.child(self.metrics.upstream_latency, route).observe(latency)
        log_request(
            method=scope["method"],
            path=scope["path"],
            status=exchange.status,
            bytes_in=exchange.bytes_in,
            bytes_out=exchange.bytes_out,
            upstream_ms=exchange.upstream_ms,
            total_ms=(time.perf_counter() - started) * 1000,
            **({"client_left": True} if exchange.client_left else {}),
        )


async def read_body(receive: Receive, scope: Scope, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes without reading it all."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client disconnected during the request body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes", code="body_too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class CompactedRoute:
    """``POST`` to a compacted route (one per dialect: chat completions, Responses, Anthropic
    Messages): parse, rewrite (the compaction hook), forward, relay.

    When the rewrite offers a retry and the provider answers that the context is too long, the
    request is compacted harder and sent once more; the client sees only the second answer.
    """

    def __init__(self, resources: Resources, dialect: Dialect, target: Target) -> None:
        self.resources = resources
        self.dialect = dialect
        self.target = target

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        res, dialect = self.resources, self.dialect
        started = time.perf_counter()
        exchange = Exchange()
        try:
            limit = res.settings.server.max_body_bytes
            recorded = res.recorder is not None and dialect.records
            view = HeaderView.of(scope["headers"])
            target = self.target.resolve(view)
            # A request compaction leaves alone streams through, unless it is to be recorded.
            streams = _declared(scope, limit) and not recorded
            kept = res.rewriter.untouched(scope["headers"]) if streams else None
            try:
                url = target.url(scope)
                if kept is None:
                    raw = await read_body(receive, scope, limit)
                    exchange.bytes_in = len(raw)
                    request = ClientRequest(
                        raw=raw,
                        headers=scope["headers"],
                        dialect=dialect,
                        credentials=target.caller_credentials(view),
                    )
                    if recorded:
                        res.recorder.write(request)  # type: ignore[union-attr]
                    async with NoticeDisconnect(receive) as watch:
                        outgoing = await res.rewriter.rewrite(request)
                    if watch.gone:  # nothing sent for a client that has left (issue 17)
                        exchange.status = CLIENT_CLOSED
                        return
            except ProxyError as error:
                exchange.status = error.status_code
                exchange.bytes_out = await send_error(send, error, body=dialect.error_body(error))
                return
            except ConnectionResetError:
                exchange.status = CLIENT_CLOSED
                return
            headers = target.headers(view, drop_content_length=kept is None)
            body: dict[str, Any]
            if kept is not None:
                # Never held or parsed (issue 9): streamed through like any other /v1 route.
                body = {"streamed": True, "max_body_bytes": limit, "extra_headers": kept}
            else:
                # Only a parsed body offers a retry: never parse one just for this.
                streaming = outgoing.retry is not None and request.body.get("stream") is True
                hold = res.settings.upstream.stream_hold_seconds
                body = {"outgoing": outgoing, "streaming": streaming, "stream_hold_seconds": hold}
            await forward(
                res.upstream,
                "POST",
                url,
                headers,
                receive,
                send,
                exchange,
                route=dialect.name,
                error_body=dialect.error_body,
                **body,
            )
        finally:
            res.finish(dialect.name, scope, exchange, started)


class PassThrough:
    """Every other method and path under /v1: bodies streamed both ways, nothing changed.
    ``target``: whose URL, auth and error shape (OpenAI's; Anthropic's for count_tokens, and for
    any request carrying ``anthropic-version``: the anthropic SDK's models, files, batches)."""

    def __init__(self, resources: Resources, target: Target) -> None:
        self.resources = resources
        self.target = target

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        res = self.resources
        view = HeaderView.of(scope["headers"])
        wire = self.target.resolve(view)
        started = time.perf_counter()
        exchange = Exchange()
        try:
            try:
                url = wire.url(scope)
            except ProxyError as error:
                exchange.status = error.status_code
                exchange.bytes_out = await send_error(send, error, body=wire.error_body(error))
                return
            headers = wire.headers(view)
            limit = res.settings.server.max_body_bytes
            if _declared_length(scope) > limit:
                # Refused on the head alone: not one byte of it reaches the provider.
                exchange.status = PayloadTooLarge.status_code
                error = body_too_large(limit)
                exchange.bytes_out = await send_error(
                    send, error, extra_headers=CLOSE, body=wire.error_body(error)
                )
                return
            await forward(
                res.upstream,
                scope["method"],
                url,
                headers,
                receive,
                send,
                exchange,
                streamed=_has_body(scope),
                max_body_bytes=limit,
                error_body=wire.error_body,
            )
        finally:
            res.finish("passthrough", scope, exchange, started)


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return 0


def _declared(scope: Scope, limit: int) -> bool:
    """The body's length is declared and within ``limit`` (the server holds the client to it),
    so it may stream through; otherwise it is read whole, where the limit is enforced."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.isdigit() and int(value) <= limit
    return False


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value != b"0"
        if name == b"transfer-encoding":
            return True
    return False


async def forward(
    upstream: UpstreamClient | None,
    method: str,
    url: str,
    headers: RawHeaders,
    receive: Receive,
    send: Send,
    exchange: Exchange,
    *,
    outgoing: Outgoing | None = None,
    streaming: bool = False,
    stream_hold_seconds: float = 0.0,
    streamed: bool = False,
    max_body_bytes: int = 0,
    extra_headers: RawHeaders = (),
    route: str = "passthrough",
    error_body: Callable[[ProxyError], bytes] | None = None,
) -> None:
    """Send upstream and relay back, recording in ``exchange`` what happened.

    The request body is ``outgoing.body`` (a request read whole and rewritten: its response
    headers are added, its retry is tried once on a context overflow, its observer sees the
    answer and its ``after`` runs once the response is relayed); else, when ``streamed``, it is
    streamed from ``receive`` (and counted), a body growing past ``max_body_bytes`` aborting
    the upstream request (the client gets a 413 if the provider has not answered yet); else the
    request has no body. ``streaming``: the client asked for SSE (an overflow may then show in
    the stream, looked for at most ``stream_hold_seconds``). The provider is asked only for
    codings the proxy can read where it reads the answer. Errors of ours are shaped by
    ``error_body``.
    """
    assert upstream is not None, "the upstream client is created in the lifespan"
    started = time.perf_counter()
    streamed = outgoing is None and streamed
    answer: ResponseTail | UpstreamResponse | None = None  # the provider's, once it answers
    async with CancelOnDisconnect(receive, watch_now=not streamed) as guard:
        body: bytes | AsyncIterator[bytes] | None = None
        if outgoing is not None:
            body, extra_headers = outgoing.body, outgoing.response_headers
            if outgoing.observe is not None or outgoing.retry is not None:
                headers = readable_accept_encoding(headers)
        elif streamed:
            body = stream_request_body(receive, guard, exchange, limit=max_body_bytes)
        try:
            response = await upstream.send(method, url, headers, body)
            if outgoing is not None and outgoing.retry is not None:
                look = await look_for_overflow(
                    response, streaming=streaming, hold_seconds=stream_hold_seconds
                )
                response = look.response
                if look.overflowed and response.status >= 400 and outgoing.observe is not None:
                    # The answer may state the window: learned before the retry plans.
                    outgoing.observe(response.status, response.headers, look.error)
                retried = await outgoing.retry() if look.overflowed else None
                if retried is not None:
                    await response.aclose()
                    outgoing, extra_headers = retried, retried.response_headers
                    response = await upstream.send(method, url, headers, outgoing.body)
        except ProxyError as error:
            close = CLOSE if error is guard.refused else ()
            shaped = error_body(error) if error_body is not None else None
            exchange.status = error.status_code
            exchange.bytes_out = await send_error(send, error, extra_headers=close, body=shaped)
            return
        exchange.upstream_ms = (time.perf_counter() - started) * 1000
        exchange.answered = True
        answer = response
        if outgoing is not None and outgoing.observe is not None:
            response = answer = ResponseTail(response)
        try:
            await relay(response, send, exchange, extra_headers=extra_headers)
        except UpstreamError as error:
            # Headers are out: all that is left is to end the client's connection unfinished.
            exchange.status = cut_off(error, route=route)
            return
        finally:
            await response.aclose()
        _after_response(outgoing, answer)
        return
    # Reached only when the client disconnected, or its body outgrew the limit.
    if guard.refused is not None and not exchange.answered:  # a 413, not a 499
        error = guard.refused
        shaped = error_body(error) if error_body is not None else None
        exchange.status = error.status_code
        exchange.bytes_out = await send_error(send, error, extra_headers=CLOSE, body=shaped)
        return
    if exchange.responded:
        exchange.client_left = True
        # The provider answered and the turn happened: openai-python, for one, closes a stream
        # as soon as it reads `data: [DONE]`, often before the provider's body has ended.
        _after_response(outgoing, answer)
        return
    exchange.status = CLIENT_CLOSED
    if exchange.upstream_ms is None:  # it left while the provider had not answered
        exchange.upstream_ms = (time.perf_counter() - started) * 1000


def _after_response(
    outgoing: Outgoing | None, answer: ResponseTail | UpstreamResponse | None
) -> None:
    """What the rewrite asked for once the provider has answered: its observer sees the answer
    (the end of it, for usage), and its ``after`` work (the ahead-of-time summary) is queued
    unless the provider refused the request."""
    if outgoing is None or answer is None:
        return
    if outgoing.observe is not None and isinstance(answer, ResponseTail):
        outgoing.observe(answer.status, answer.headers, answer.tail())
    if outgoing.after is not None and answer.status < 400:
        outgoing.after()
