"""The recall rounds of one request (docs/recall.md): the provider's answer is looked
at just long enough to know whether it calls the proxy's recall tool; if it does, the proxy
answers the call from the originals, asks again, and the client only ever receives the final
answer.

- A plain answer is read whole (it is small next to the call it answers) and relayed unchanged
  when it calls no recall.
- A stream is held only until its first event that says what the reply is. A tool call is read
  to the end of the stream, then relayed unchanged if none of its calls is a recall. Text (or a
  refusal) is relayed at once from that event on, so a reply that starts with text waits for
  nothing but the events before it (the stream's opening, reasoning); a recall it calls after
  its text is answered by the stream itself (``proxy/proxying/recall/stream.py``).
- Bounded: ``recall.max_rounds`` rounds, ``recall.timeout_seconds`` in all, and the re-ask that
  ends them forbids tools, so the model answers with what it has. The tool stays declared on
  that re-ask (its history holds recall calls, which some providers refuse without their
  tool); a provider that calls it all the same has those calls taken out of the answer
  (``RecallShape.strip``): the client never declared the tool. A stream held past
  ``_MAX_HELD_BYTES`` undecided is relayed as it is.

Headers ``X-Compaction-Recalls`` (rounds) and ``X-Compaction-Recall-Tokens`` (what the rounds
were billed) go on the final answer (counting the rounds run before its headers), and its usage
has the rounds' added (``proxy/proxying/recall/usage.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from proxy.compaction.decision import Answer, Resend
from proxy.compaction.dialect.recall import TEXT, TOOL, UNDECIDED, CallStrip, ModelReply
from proxy.compaction.recall.tool import RecallSession
from proxy.proxying.recall.asker import Asker, Send
from proxy.proxying.recall.stream import RecallStream, usage_events
from proxy.proxying.recall.usage import (
    EVENT_END,
    StreamWithRounds,
    body_with_rounds,
    sse_data,
)
from proxy.proxying.responses import BufferedResponse, PrefixedResponse
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder

_MAX_HELD_BYTES = 8 * 1024 * 1024


@dataclass
class _Looked:
    """An answer looked at: the response to relay if it is final, the reply read (None: not a
    tool call), and its decoded bytes (its usage, for the ledger)."""

    response: UpstreamResponse
    reply: ModelReply | None = None
    decoded: bytes = b""


@dataclass(frozen=True, eq=False)
class RecallStage:
    """The answer stage of a request that went out with the recall tool: the final answer once
    the model's recall calls are answered, with the headers that count the rounds; its
    follow-up prices the rounds too (``RecallSession.after_rounds``)."""

    session: RecallSession
    statuses = frozenset({200})  # an error calls no tool
    stream_statuses = statuses

    async def run(self, answer: Answer, resend: Resend) -> Answer:
        decision = answer.decision
        assert isinstance(decision.body, bytes)
        session = self.session
        rounds = await recall_rounds(
            answer.response,
            session,
            sent=decision.body,
            streaming=decision.streaming,
            send=resend,
        )
        if not rounds.headers and not rounds.later:
            # Built as it is (dataclasses.replace looks its fields up on every call).
            return Answer(rounds.response, decision, answer.observed)
        final = replace(
            decision,
            response_headers=[*decision.response_headers, *rounds.headers],
            follow_up=session.after_rounds(decision.follow_up, summed=rounds.summed),
        )
        return Answer(rounds.response, final, answer.observed)


@dataclass(frozen=True)
class Rounds:
    """The answer to relay, the headers to add to it (none: no round ran before it), whether
    its usage holds the rounds' usage too (then it is priced as a whole; asked once it has been
    relayed), and whether rounds may still run while it is relayed (a ``RecallStream``)."""

    response: UpstreamResponse
    headers: RawHeaders
    summed: Callable[[], bool]
    later: bool = False


async def recall_rounds(
    response: UpstreamResponse,
    session: RecallSession,
    *,
    sent: bytes,
    streaming: bool,
    send: Send,
) -> Rounds:
    """Answer the model's recall calls until its reply is final (see the module docstring)."""
    asker = Asker(session, sent, send)
    while True:
        if response.status != 200:
            looked = _Looked(response)
        elif streaming:
            looked = await _look_at_stream(response, asker)
        else:
            looked = await _look_at_body(response, session)
        recalls = asker.recalls(looked.reply)
        if not recalls:
            break
        assert looked.reply is not None
        response = await asker.again(looked.reply, recalls, looked.decoded)
    if isinstance(looked.response, RecallStream):
        # Text is going out: the rounds run so far are in the headers, the stream runs any
        # that come after the text and tells the session when it is closed.
        headers = asker.headers() if asker.tails else []
        return Rounds(looked.response, headers, summed=looked.response.summed, later=True)
    if not asker.tails:
        return Rounds(looked.response, [], summed=_no)
    strip = asker.leftover(looked.reply)
    final, summed = _with_rounds_usage(looked, asker.usages(), streaming, strip)
    headers = asker.headers()
    session.finished(asker.tails)
    return Rounds(final, headers, summed=summed)


async def _look_at_body(response: UpstreamResponse, session: RecallSession) -> _Looked:
    decoder = Decoder.of(response.headers)
    raw = await response.read()
    await response.aclose()
    held = BufferedResponse(response.status, response.headers, raw)
    if not decoder.readable:
        return _Looked(held)
    decoded = decoder.decode(raw)
    if not _may_name(decoded, session.tool_name):
        return _Looked(held, None, decoded)  # calls no recall: nothing to parse it for
    return _Looked(held, session.shape.read(decoded), decoded)


def _may_name(body: bytes, tool_name: str) -> bool:
    """Whether a JSON ``body`` may name the tool: it holds the name, or a ``\\u`` escape that
    could spell it (the name is letters, digits, ``_`` and ``-``: no other escape can)."""
    return tool_name.encode() in body or b"\\u" in body


async def _look_at_stream(response: UpstreamResponse, asker: Asker) -> _Looked:
    decoder = Decoder.of(response.headers)
    if not decoder.readable:
        return _Looked(response)
    shape = asker.session.shape
    chunks = response.iter_raw()
    raw = bytearray()
    text = b""
    events: list[bytes] = []
    tool = False
    async for chunk in chunks:
        raw += chunk
        text += decoder.decode(chunk)
        *complete, text = EVENT_END.split(text)
        events += complete[::2]  # each event, then its end
        for event in complete[::2] if not tool else ():
            data = sse_data(event)
            kind = shape.classify(data) if data is not None else UNDECIDED
            if kind == TEXT:
                stream = RecallStream(
                    response, head=events, rest=text, chunks=chunks, decoder=decoder, asker=asker
                )
                return _Looked(stream)
            if kind == TOOL:
                tool = True
                break
        if not tool and len(raw) > _MAX_HELD_BYTES:
            return _Looked(PrefixedResponse(response, bytes(raw), chunks))
    await response.aclose()
    if text.strip():
        events.append(text)
    held = BufferedResponse(response.status, response.headers, bytes(raw))
    parsed = [data for e in events if (data := sse_data(e)) is not None]
    reply = shape.read_stream(parsed) if tool else None
    return _Looked(held, reply, usage_events(parsed))


def _no() -> bool:
    return False


def _yes() -> bool:
    return True


def _with_rounds_usage(
    looked: _Looked, rounds: list[dict[str, int]], streaming: bool, strip: CallStrip | None
) -> tuple[UpstreamResponse, Callable[[], bool]]:
    """The final answer with the rounds' usage added (proxying/recall/usage.py) and the recall
    calls ``strip`` takes out, and whether its usage holds the rounds' (a stream knows once it
    has ended); a failed answer, or one in a coding we cannot read, goes out as it is."""
    final = looked.response
    if final.status != 200 or not Decoder.of(final.headers).readable:
        return final, _no
    if streaming:
        stream = StreamWithRounds(final, rounds, strip)
        return stream, stream.summed
    if not looked.decoded:
        return final, _no
    final, summed = body_with_rounds(final, looked.decoded, rounds, strip)
    return final, _yes if summed else _no
