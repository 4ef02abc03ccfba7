"""Holding a response back just long enough to tell whether it says the prompt is too long.

An error answer says it in its text (proxy/upstream/overflow_answers.py). A stream may say it
too: llama-cpp-python's server answers an overflowing *streamed* request with 200 and an empty
body; OpenAI's Responses API may answer a streamed request with 200, its opening events and
then a ``response.failed`` event carrying ``context_length_exceeded`` (docs/dialects.md). Only
a request the proxy can still compact harder is held back: a 400 for the first
``ERROR_PREFIX_BYTES`` of its error body (enough to recognise an overflow, and all a client can
make us hold, since a longer body is relayed as it arrives, prefix first, never buffered whole);
a stream until its first event that is not an opening one, and at most
``upstream.stream_hold_seconds``. A provider fails an input too long as soon as it has read it,
while a reasoning model may think for seconds before its first output: past the hold its
``response.created`` goes out, so a client showing progress shows it. Once it is
out, the stream is the provider's: a later failure reaches the client as sent (a retry's stream
is another response, with another id, which the SDKs refuse in the same stream).

What is read is decoded first (proxy/upstream/content_coding.py): providers compress their
answers; the bytes relayed stay theirs.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, replace

from proxy.compaction.decision import Answer, FollowUp, Resend
from proxy.proxying.responses import BufferedResponse, PrefixedResponse, drop_pending
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder
from proxy.upstream.overflow_answers import ERROR_PREFIX_BYTES, is_overflow_error, says_overflow

# The events a Responses stream opens with, before the model's first output or a failure.
_OPENING = frozenset({b"response.created", b"response.in_progress", b"response.queued"})
_FAILED = frozenset({b"response.failed", b"error"})
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_TYPE = re.compile(rb'"type"\s*:\s*"([^"]*)"')


def _stream_verdict(prefix: bytes) -> bool | None:
    """Whether a streamed 200 is an overflow, from its first event that is not an opening one;
    None while there is none yet (and the prefix is still small enough to hold)."""
    for event in _EVENT_END.split(prefix)[:-1]:  # the complete events
        name, data = _event(event)
        if name not in _OPENING:
            return name in _FAILED and _failure_is_overflow(name, data)
    return None if len(prefix) < ERROR_PREFIX_BYTES else False


def _event(event: bytes) -> tuple[bytes, bytes]:
    """(name, data) of one SSE event; the name from its ``event:`` line, else its data's type."""
    name, data = b"", []
    for line in event.splitlines():
        field, _, value = line.partition(b":")
        if field == b"event":
            name = value.strip()
        elif field == b"data":
            data.append(value.strip())
    joined = b"\n".join(data)
    if not name:
        found = _TYPE.search(joined[:200])
        name = found.group(1) if found else b""
    return name, joined


def _failure_is_overflow(name: bytes, data: bytes) -> bool:
    """The failure's error (``response.error``, or the ``error`` event itself) says the input is
    too long; the rest of the event (the echoed instructions, say) is not read."""
    try:
        event = json.loads(data)
        error = event["response"]["error"] if name == b"response.failed" else event
        text = f"{error.get('code')} {error.get('message')}"
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return says_overflow(text.encode())


_ERRORS = frozenset({400, 413, 422})  # the statuses an overflow answer comes with


@dataclass(frozen=True, eq=False)
class OverflowRescue:
    """The answer stage of a request compaction can compact harder: an answer that says the
    context is too long is replaced, once, by the answer to the smaller request the follow-up
    plans (``FollowUp.replacement``); the client sees only that one. A whole answer says it
    with an error status, a stream may say it at its start (held at most ``hold_seconds``)."""

    follow_up: FollowUp
    hold_seconds: float = 0.0
    statuses = _ERRORS
    stream_statuses = _ERRORS | {200}

    async def run(self, answer: Answer, resend: Resend) -> Answer:
        streaming = answer.decision.streaming
        look = await look_for_overflow(
            answer.response, streaming=streaming, hold_seconds=self.hold_seconds
        )
        held = replace(answer, response=look.response)
        if not look.overflowed:
            return held
        if look.response.status >= 400:
            # The answer may state the window: learned before the replacement is planned.
            self.follow_up.observe(look.response.status, look.response.headers, look.error)
            held.observed = True
        replacement = await self.follow_up.replacement()
        if replacement is None or replacement.body is None:
            return held
        await look.response.aclose()
        return Answer(await resend(replacement.body), replacement)


@dataclass
class Look:
    """What looking at an answer found: whether it says the prompt is too long, the response to
    relay in its place if it is not retried, and the decoded start of an error body (what a
    window is learned from)."""

    overflowed: bool
    response: UpstreamResponse
    error: bytes = b""


async def look_for_overflow(
    response: UpstreamResponse, *, streaming: bool, hold_seconds: float = 0.0
) -> Look:
    """Read as much of ``response`` as it takes to tell whether it is an overflow (for a stream,
    at most ``hold_seconds``)."""
    decoder = Decoder.of(response.headers, limit=ERROR_PREFIX_BYTES)
    if not decoder.readable:
        return Look(False, response)  # a coding we did not ask for: relayed unread
    try:
        if response.status in (400, 413, 422):
            return await _look_at_error(response, decoder)
        if streaming and response.status == 200 and hold_seconds > 0:
            return await _look_at_stream(response, decoder, hold_seconds)
    except BaseException:  # an upstream error, or the client gone: nothing will be relayed
        await response.aclose()
        raise
    return Look(False, response)


async def _look_at_error(response: UpstreamResponse, decoder: Decoder) -> Look:
    chunks = response.iter_raw()
    raw = text = b""
    async for chunk in chunks:
        raw += chunk
        text += decoder.decode(chunk)
        if len(raw) >= ERROR_PREFIX_BYTES or len(text) >= ERROR_PREFIX_BYTES:
            held = PrefixedResponse(response, raw, chunks)
            return Look(is_overflow_error(response.status, text), held, text)
    await response.aclose()
    buffered = BufferedResponse(response.status, response.headers, raw)
    return Look(is_overflow_error(response.status, text), buffered, text)


async def _look_at_stream(response: UpstreamResponse, decoder: Decoder, hold: float) -> Look:
    chunks = response.iter_raw()
    raw = text = b""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    while True:
        # The read goes on in a task of its own: when the hold ends first, it is not cancelled
        # (that would end the provider's stream) but handed on to the relay.
        pending = asyncio.ensure_future(anext(chunks, None))
        try:
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, deadline - loop.time()))
        except BaseException:
            drop_pending(pending)
            raise
        if not done:
            return Look(False, PrefixedResponse(response, raw, chunks, pending=pending))
        chunk = pending.result()
        if chunk is None:
            break
        raw += chunk
        text += decoder.decode(chunk)
        verdict = _stream_verdict(text) if text else None
        if verdict is None and len(raw) >= ERROR_PREFIX_BYTES:
            verdict = False
        if verdict is not None:
            return Look(verdict, PrefixedResponse(response, raw, chunks))
    await response.aclose()
    # An empty answer to a streamed request is an overflow (llama-cpp-python).
    return Look(not raw, BufferedResponse(response.status, response.headers, raw))
