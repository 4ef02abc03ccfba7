"""Sending one request upstream and relaying the answer to the client: ``forward()``.

The request body is one of three: the bytes compaction decided on (``Decision.body``), the
client's own body streamed as it arrives (refused past the limit), or none. A decision with a
follow-up (a request compaction looked into) asks the provider only for codings the proxy can
read, has its answer looked at for a context overflow (then the follow-up may replace the
request, once), and tells the follow-up how the answer ended.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial

from proxy import tracing
from proxy.compaction import protocol
from proxy.compaction.decision import Decision, FollowUp
from proxy.errors import ProxyError, UpstreamError
from proxy.proxying.body import stream_request_body
from proxy.proxying.native_retry import native_answer, with_upstream_headers
from proxy.proxying.overflow import look_for_overflow
from proxy.proxying.recall.loop import recall_rounds
from proxy.proxying.relay import CLIENT_CLOSED, CLOSE, CancelOnDisconnect, relay, send_error
from proxy.proxying.responses import ResponseTail
from proxy.server.abort import cut_off
from proxy.server.access_log import Exchange
from proxy.types import RawHeaders, Receive, Send
from proxy.upstream.base import UpstreamClient, UpstreamResponse
from proxy.upstream.content_coding import readable_accept_encoding

ErrorBody = Callable[[ProxyError], bytes]


@dataclass(frozen=True)
class _Request:
    """What goes upstream, but the body."""

    upstream: UpstreamClient
    method: str
    url: str
    headers: RawHeaders

    async def send(self, body: bytes | AsyncIterator[bytes] | None) -> UpstreamResponse:
        return await self._send(self.headers, body)

    async def send_for(
        self, decision: Decision, body: bytes | AsyncIterator[bytes] | None
    ) -> UpstreamResponse:
        """Send ``body`` with the headers ``decision`` sets (strategy native's beta flags)."""
        return await self._send(with_upstream_headers(self.headers, decision), body)

    async def _send(
        self, headers: RawHeaders, body: bytes | AsyncIterator[bytes] | None
    ) -> UpstreamResponse:
        if not tracing.is_on():
            return await self.upstream.send(self.method, self.url, headers, body)
        # The provider call's span lasts until its response headers (the relay is the request's).
        with tracing.span(
            self.method, tracing.provider_call(self.method, self.url), client=True
        ) as call:
            traced = tracing.outgoing(headers)  # the provider continues our trace
            response = await self.upstream.send(self.method, self.url, traced, body)
            tracing.failed(call, response.status)
            return response


async def _resend(request: _Request, decision: Decision) -> UpstreamResponse:
    return await request.send_for(decision, decision.body)


@dataclass
class _Answer:
    """The provider's answer being relayed, and the decision it answers (a replacement's, after
    an overflow). ``observed``: its follow-up was already shown this answer (an overflow no
    replacement was found for), so it is not shown it again."""

    response: UpstreamResponse
    decision: Decision
    observed: bool = False


async def forward(
    *,
    upstream: UpstreamClient,
    method: str,
    url: str,
    headers: RawHeaders,
    decision: Decision,
    client_body: bool = True,
    receive: Receive,
    send: Send,
    exchange: Exchange,
    max_body_bytes: int,
    stream_hold_seconds: float = 0.0,
    route: str,
    error_body: ErrorBody,
) -> None:
    """Send upstream and relay back, recording in ``exchange`` what happened.

    ``decision.body`` is what the provider receives; when it is None, the client's body
    (``client_body``: it has one) is streamed from ``receive``, a body growing past
    ``max_body_bytes`` aborting the upstream request (the client gets a 413 if the provider
    has not answered yet). ``decision.response_headers`` are added to the client's response.
    An overflow may show inside an SSE stream (``decision.streaming``), looked for at most
    ``stream_hold_seconds``. Errors of ours are shaped by ``error_body``; ``route`` labels a
    response cut off mid-body.
    """
    started = time.perf_counter()
    streamed = decision.body is None and client_body
    answer: _Answer | None = None
    tail: ResponseTail | None = None
    async with CancelOnDisconnect(receive, watch_now=not streamed) as guard:
        body: bytes | AsyncIterator[bytes] | None = decision.body
        if streamed:
            body = stream_request_body(receive, guard, exchange, limit=max_body_bytes)
        if decision.follow_up is not None:
            headers = readable_accept_encoding(headers)
        request = _Request(upstream, method, url, headers)
        exchange.added_ms = (time.perf_counter() - exchange.arrived) * 1000
        try:
            answer = _Answer(await request.send_for(decision, body), decision)
            if decision.native is not None:  # strategy native: refused fields, what it did
                resend = partial(_resend, request)
                answer = _Answer(
                    *await native_answer(answer.response, decision, decision.native, resend)
                )
            if decision.follow_up is not None:
                answer = await _unless_overflow(
                    answer, decision.follow_up, request, hold_seconds=stream_hold_seconds
                )
            if answer.decision.recall is not None:
                answer = await _with_recalls(answer, request)
        except ProxyError as error:
            close = CLOSE if error is guard.refused else ()
            await send_error(send, error, exchange, extra_headers=close, body=error_body(error))
            return
        exchange.upstream_ms = (time.perf_counter() - started) * 1000
        exchange.answered = True
        response = answer.response
        if answer.decision.follow_up is not None and not answer.observed:
            response = tail = ResponseTail(response)
        if tracing.is_on():
            tracing.annotate(protocol.span_attributes(answer.decision.response_headers))
        try:
            await relay(response, send, exchange, extra_headers=answer.decision.response_headers)
        except UpstreamError as error:
            # Headers are out: all that is left is to end the client's connection unfinished.
            exchange.status = cut_off(error, route=route)
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


async def _unless_overflow(
    answer: _Answer, follow_up: FollowUp, request: _Request, *, hold_seconds: float
) -> _Answer:
    """``answer``, or, when it says the context is too long and the follow-up has a smaller
    request to send instead, the answer to that one."""
    look = await look_for_overflow(
        answer.response, streaming=answer.decision.streaming, hold_seconds=hold_seconds
    )
    held = _Answer(look.response, answer.decision)
    if not look.overflowed:
        return held
    if look.response.status >= 400:
        # The answer may state the window: learned before the replacement is planned.
        follow_up.observe(look.response.status, look.response.headers, look.error)
        held.observed = True
    replacement = await follow_up.replacement()
    if replacement is None or replacement.body is None:
        return held
    await look.response.aclose()
    return _Answer(await request.send(replacement.body), replacement)


async def _with_recalls(answer: _Answer, request: _Request) -> _Answer:
    """The final answer once the model's recall calls are answered (proxying/recall/loop.py),
    with the headers that count the rounds."""
    decision = answer.decision
    assert decision.recall is not None and isinstance(decision.body, bytes)
    session = decision.recall
    rounds = await recall_rounds(
        answer.response,
        session,
        sent=decision.body,
        streaming=decision.streaming,
        send=request.send,
    )
    if not rounds.headers and not rounds.later:
        return _Answer(rounds.response, decision, answer.observed)
    final = replace(
        decision,
        response_headers=[*decision.response_headers, *rounds.headers],
        follow_up=session.after_rounds(decision.follow_up, summed=rounds.summed),
    )
    return _Answer(rounds.response, final, answer.observed)


def _answered(answer: _Answer, tail: ResponseTail | None) -> None:
    """The follow-up hears how the answer ended: the end of its body (usage, a window), and,
    unless the provider refused the request, that it was answered (queues work due after)."""
    follow_up = answer.decision.follow_up
    if follow_up is None:
        return
    if tail is not None:
        follow_up.observe(tail.status, tail.headers, tail.tail())
    if answer.response.status < 400:
        follow_up.answered()
