"""Sending one request upstream and relaying the answer to the client: ``forward()``.

The request body is one of three: the bytes compaction decided on (``Decision.body``), the
client's own body streamed as it arrives (refused past the limit), or none. The decision's
stages (``AnswerStage``: the native report, the overflow rescue, the recall rounds, each built
only for a request that needs it) run in order on the answer before it is relayed. A decision
with a follow-up (a request compaction looked into) asks the provider only for codings the
proxy can read, and tells the follow-up how the answer ended.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from proxy import tracing
from proxy.compaction import protocol
from proxy.compaction.decision import Answer, AnswerStage, Decision
from proxy.errors import ProxyError, UpstreamError
from proxy.proxying.body import stream_request_body
from proxy.proxying.headers import replaced
from proxy.proxying.relay import (
    CLIENT_CLOSED,
    CLOSE,
    CancelOnDisconnect,
    NoticeDisconnect,
    relay,
    send_error,
)
from proxy.proxying.responses import BufferedResponse, ResponseTail
from proxy.server.abort import cut_off
from proxy.server.access_log import Exchange
from proxy.types import RawHeaders, Receive, Send
from proxy.upstream.base import UpstreamClient, UpstreamResponse
from proxy.upstream.content_coding import readable_accept_encoding

ErrorBody = Callable[[ProxyError], bytes]


@dataclass(frozen=True)
class Upstream:
    """Where one request goes: the provider's client, the method, URL and headers (but the
    body)."""

    client: UpstreamClient
    method: str
    url: str
    headers: RawHeaders

    async def send(self, body: bytes | AsyncIterator[bytes] | None) -> UpstreamResponse:
        return await self._send(self.headers, body)

    async def send_for(
        self, decision: Decision, body: bytes | AsyncIterator[bytes] | None
    ) -> UpstreamResponse:
        """Send ``body`` with the headers ``decision`` sets (strategy native's beta flags)."""
        return await self._send(replaced(self.headers, decision.upstream_headers), body)

    async def _send(
        self, headers: RawHeaders, body: bytes | AsyncIterator[bytes] | None
    ) -> UpstreamResponse:
        if not tracing.on:
            return await self.client.send(self.method, self.url, headers, body)
        # The provider call's span lasts until its response headers (the relay is the request's).
        with tracing.span(
            self.method, tracing.provider_call(self.method, self.url), client=True
        ) as call:
            traced = tracing.outgoing(headers)  # the provider continues our trace
            response = await self.client.send(self.method, self.url, traced, body)
            tracing.failed(call, response.status)
            return response


@dataclass(frozen=True)
class Downstream:
    """The client's side of one request: its ASGI channels, the ``Exchange`` that records what
    happened, its body's limit (``has_body``: it sends one), the route (its label on a
    response cut off mid-body, its API's shape of our errors), and the watcher of the client
    that a read body started (``notice``), to carry on with."""

    receive: Receive
    send: Send
    exchange: Exchange
    max_body_bytes: int
    route: str
    error_body: ErrorBody
    has_body: bool = True
    notice: NoticeDisconnect | None = None


async def forward(request: Upstream, decision: Decision, client: Downstream) -> None:
    """Send upstream and relay back, recording in ``client.exchange`` what happened.

    ``decision.body`` is what the provider receives; when it is None, the client's body
    (``client.has_body``: it has one) is streamed from ``client.receive``, a body growing past
    ``client.max_body_bytes`` aborting the upstream request (the client gets a 413 if the
    provider has not answered yet). The decision's stages run on the answer before it is
    relayed; ``decision.response_headers`` are added to the client's response.
    """
    receive, send, exchange = client.receive, client.send, client.exchange
    error_body = client.error_body
    started = time.perf_counter()
    streamed = decision.body is None and client.has_body
    answer: Answer | None = None
    tail: ResponseTail | None = None
    async with CancelOnDisconnect(receive, watch_now=not streamed, notice=client.notice) as guard:
        body: bytes | AsyncIterator[bytes] | None = decision.body
        if streamed:
            body = stream_request_body(receive, guard, exchange, limit=client.max_body_bytes)
        if decision.follow_up is not None:
            headers = readable_accept_encoding(request.headers)
            request = Upstream(request.client, request.method, request.url, headers)
        exchange.added_ms = (time.perf_counter() - exchange.arrived) * 1000
        try:
            answer = Answer(await request.send_for(decision, body), decision)
            for stage in decision.stages:
                if _looks_at(stage, answer):
                    answer = await stage.run(answer, request.send)
        except ProxyError as error:
            close = CLOSE if error is guard.refused else ()
            await send_error(send, error, exchange, extra_headers=close, body=error_body(error))
            return
        exchange.upstream_ms = (time.perf_counter() - started) * 1000
        exchange.answered = True
        response = answer.response
        # A body a stage read whole goes out in one message (a send less, a layer less).
        whole = response.body if isinstance(response, BufferedResponse) else None
        if answer.decision.follow_up is not None and not answer.observed:
            response = tail = ResponseTail(response)
            if whole is not None:
                tail.keep_whole(whole)
        if tracing.on:
            tracing.annotate(protocol.span_attributes(answer.decision.response_headers))
        try:
            await relay(
                response,
                send,
                exchange,
                extra_headers=answer.decision.response_headers,
                whole=whole,
            )
        except UpstreamError as error:
            # Headers are out: all that is left is to end the client's connection unfinished.
            exchange.status = cut_off(error, route=client.route)
            exchange.cut_off = True
            return
        finally:
            await response.aclose()
        _answered(answer, tail)
        return
    # Reached only when the client disconnected, or its body outgrew the limit.
    if guard.refused is not None and not exchange.answered:  # a 413, not a 499
        refused = guard.refused
        await send_error(send, refused, exchange, extra_headers=CLOSE, body=error_body(refused))
        return
    if exchange.responded:
        exchange.client_left = True
        # The provider answered and the turn happened: openai-python, for one, closes a stream
        # as soon as it reads `data: [DONE]`, often before the provider's body has ended.
        if answer is not None:
            _answered(answer, tail)
        return
    exchange.status = CLIENT_CLOSED
    if exchange.upstream_ms is None:  # it left while the provider had not answered
        exchange.upstream_ms = (time.perf_counter() - started) * 1000


def _looks_at(stage: AnswerStage, answer: Answer) -> bool:
    """Whether ``stage`` runs on ``answer``: one of the statuses it looks at, to a decision that
    holds it (the answer to a replacement is not the replaced request's stages' business)."""
    decision = answer.decision
    statuses = stage.stream_statuses if decision.streaming else stage.statuses
    return answer.response.status in statuses and any(s is stage for s in decision.stages)


def _answered(answer: Answer, tail: ResponseTail | None) -> None:
    """The follow-up hears how the answer ended: the end of its body (usage, a window), and,
    unless the provider refused the request, that it was answered (queues work due after)."""
    follow_up = answer.decision.follow_up
    if follow_up is None:
        return
    if tail is not None:
        follow_up.observe(tail.status, tail.headers, tail.tail())
    if answer.response.status < 400:
        follow_up.answered()
