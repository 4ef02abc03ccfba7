"""The recall rounds of one request (issue 20, docs/recall.md): the provider's answer is looked
at just long enough to know whether it calls the proxy's recall tool; if it does, the proxy
answers the call from the originals, asks again, and the client only ever receives the final
answer.

- A plain answer is read whole (it is small next to the call it answers) and relayed unchanged
  when it calls no recall.
- A stream is held only until its first event that says what the reply is: text (or a refusal)
  is relayed at once from that event on, so a reply that starts with text waits for nothing but
  the events before it (the stream's opening, reasoning); a tool call is read to the end of the
  stream, then relayed unchanged if none of its calls is a recall.
- Bounded: ``recall.max_rounds`` rounds, ``recall.timeout_seconds`` in all, and the re-ask that
  ends them forbids tools, so the model answers with what it has. A stream held past
  ``_MAX_HELD_BYTES`` undecided is relayed as it is.

Headers ``X-Compaction-Recalls`` (rounds) and ``X-Compaction-Recall-Tokens`` (what the rounds
were billed) go on the final answer, and its usage has the rounds' added
(``proxy/proxying/recall_usage.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from proxy import tracing, wirejson
from proxy.compaction.recall import RecallSession
from proxy.compaction.recall_contract import TEXT, TOOL, Answered, ModelReply
from proxy.proxying.recall_usage import (
    EVENT_END,
    StreamWithRounds,
    body_with_rounds,
    round_usage,
    sse_data,
    usage_in,
)
from proxy.proxying.responses import BufferedResponse, PrefixedResponse
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder

RECALLS = b"x-compaction-recalls"
RECALL_TOKENS = b"x-compaction-recall-tokens"
_MAX_HELD_BYTES = 8 * 1024 * 1024

Send = Callable[[bytes], Awaitable[UpstreamResponse]]


@dataclass
class _Looked:
    """An answer looked at: the response to relay if it is final, the reply read (None: not a
    tool call), and its decoded bytes (its usage, for the ledger)."""

    response: UpstreamResponse
    reply: ModelReply | None = None
    decoded: bytes = b""


@dataclass(frozen=True)
class Rounds:
    """The answer to relay, the headers to add to it (none: no round ran), and whether its usage
    holds the rounds' usage too (then it is priced as a whole; asked once it has been relayed)."""

    response: UpstreamResponse
    headers: RawHeaders
    summed: Callable[[], bool]


async def recall_rounds(
    response: UpstreamResponse,
    session: RecallSession,
    *,
    sent: bytes,
    streaming: bool,
    send: Send,
) -> Rounds:
    """Answer the model's recall calls until its reply is final (see the module docstring)."""
    settings = session.settings
    deadline = time.monotonic() + settings.timeout_seconds
    rounds = 0
    tails: list[bytes] = []
    body: dict[str, Any] | None = None
    while True:
        if response.status != 200:
            looked = _Looked(response)
        elif streaming:
            looked = await _look_at_stream(response, session)
        else:
            looked = await _look_at_body(response, session)
        reply = looked.reply
        recalls = [c for c in reply.calls if c.name == session.tool_name] if reply else []
        if not recalls or rounds >= settings.max_rounds:
            break
        rounds += 1
        tails.append(looked.decoded)
        # One span a round (proxy.tracing; a no-op while tracing is off): numbers only.
        with tracing.span(
            tracing.RECALL_ROUND, {"recall.round": rounds, "recall.calls": len(recalls)}
        ):
            answers = {call.id: await session.answer(call) for call in recalls}
            if body is None:
                body = wirejson.parse(sent)
            last = rounds >= settings.max_rounds or time.monotonic() >= deadline
            assert reply is not None
            answered = Answered(reply, answers, session.tool_name, last)
            body = session.shape.ask_again(body, answered)
            response = await send(wirejson.encode(body))
    if not rounds:
        return Rounds(looked.response, [], summed=_no)
    final, summed = _with_rounds_usage(looked, [round_usage(t) for t in tails], streaming)
    tokens = session.finished(rounds, tails)
    headers = [(RECALLS, str(rounds).encode()), (RECALL_TOKENS, str(tokens).encode())]
    return Rounds(final, headers, summed=summed)


async def _look_at_body(response: UpstreamResponse, session: RecallSession) -> _Looked:
    decoder = Decoder.of(response.headers)
    raw = await response.read()
    await response.aclose()
    held = BufferedResponse(response.status, response.headers, raw)
    if not decoder.readable:
        return _Looked(held)
    decoded = decoder.decode(raw)
    return _Looked(held, session.shape.read(decoded), decoded)


async def _look_at_stream(response: UpstreamResponse, session: RecallSession) -> _Looked:
    decoder = Decoder.of(response.headers)
    if not decoder.readable:
        return _Looked(response)
    chunks = response.iter_raw()
    raw = bytearray()
    text = b""
    events: list[dict[str, Any]] = []
    tool = False
    async for chunk in chunks:
        raw += chunk
        text += decoder.decode(chunk)
        *complete, text = EVENT_END.split(text)
        for event in complete[::2]:  # each event, then its end
            data = sse_data(event)
            if data is None:
                continue
            events.append(data)
            if not tool:
                kind = session.shape.classify(data)
                if kind == TEXT:
                    return _Looked(PrefixedResponse(response, bytes(raw), chunks))
                tool = kind == TOOL
        if not tool and len(raw) > _MAX_HELD_BYTES:
            return _Looked(PrefixedResponse(response, bytes(raw), chunks))
    await response.aclose()
    if text.strip() and (data := sse_data(text)) is not None:
        events.append(data)
    held = BufferedResponse(response.status, response.headers, bytes(raw))
    reply = session.shape.read_stream(events) if tool else None
    return _Looked(held, reply, _usage_events(events))


def _usage_events(events: list[dict[str, Any]]) -> bytes:
    """A stream's events as SSE text again, for the usage reader (only those with usage)."""
    kept = [e for e in events if usage_in(e)]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in kept)


def _no() -> bool:
    return False


def _yes() -> bool:
    return True


def _with_rounds_usage(
    looked: _Looked, rounds: list[dict[str, int]], streaming: bool
) -> tuple[UpstreamResponse, Callable[[], bool]]:
    """The final answer with the rounds' usage added (proxying/recall_usage.py), and whether
    it was (a stream knows once it has ended); a failed answer, or one in a coding we cannot
    read, goes out as it is."""
    final = looked.response
    if final.status != 200 or not Decoder.of(final.headers).readable:
        return final, _no
    if streaming:
        stream = StreamWithRounds(final, rounds)
        return stream, stream.summed
    summed = body_with_rounds(final, looked.decoded, rounds) if looked.decoded else None
    return (summed, _yes) if summed is not None else (final, _no)
