"""A streamed answer that showed text, relayed event by event while the recall loop keeps
watching it (docs/recall.md): models often write a sentence, then call a tool.

- Text goes out as it comes: the client waits for nothing.
- From the first event that starts a tool call to the end of the answer, events are held (a
  tool call is short). If none of its calls is a recall, the held events go out as they came.
- If one is, the held events never go out: the recall is answered, the provider asked again
  (``asker.Asker``), and the client's stream goes on with the new answer's events, spliced
  in the dialect's own terms (``RecallShape.splice``: its opening dropped, its blocks or items
  numbered on from those the client has, its end describing the whole reply). An SSE comment
  marks the splice (clients ignore comments). The new answer is watched the same way, up to
  ``recall.max_rounds`` rounds in all.
- A re-ask the provider refuses, or that cannot be sent, ends the stream with an ``error``
  event carrying the provider's error (the official SDKs raise it): the text already sent stays.
- Usage events carry the rounds' usage added (``usage.py``); what goes out is decoded.
- Past ``_MAX_WATCHED_BYTES`` of one answer the stream stops watching and relays the rest as it
  is (a recall called that late reaches the client).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from proxy import wirejson
from proxy.compaction import protocol
from proxy.compaction.dialect.recall import TOOL, StreamSplice
from proxy.errors import ProxyError
from proxy.proxying.recall.asker import Asker
from proxy.proxying.recall.usage import (
    EVENT_END,
    decoded_headers,
    event_with_rounds,
    sse_data,
    stripped,
    usage_in,
    with_data,
)
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder

_MAX_WATCHED_BYTES = 8 * 1024 * 1024


class RecallStream:
    """See the module docstring. ``head``: the answer's complete events read so far (decoded),
    ``rest``: the decoded bytes after them, ``chunks``: the rest of its body, coded."""

    def __init__(
        self,
        response: UpstreamResponse,
        *,
        head: list[bytes],
        rest: bytes,
        chunks: AsyncIterator[bytes],
        decoder: Decoder,
        asker: Asker,
    ) -> None:
        self.status = response.status
        self.headers = decoded_headers(response.headers)
        self._response = response
        self._head = head
        self._rest = rest
        self._chunks = chunks
        self._decoder = decoder
        self._asker = asker
        self._shape = asker.session.shape
        self._relayed: list[bytes] = []  # events as the client got them
        self._current: list[bytes] = []  # the answer being relayed, as the provider sent it
        self._watched = 0  # bytes of it kept in _current
        self._watching = True
        self._held: list[bytes] | None = None  # from a tool call's first event on
        self._splice: StreamSplice | None = None
        self._summed = 0  # rounds whose usage a relayed usage event holds
        self._finished = False

    def summed(self) -> bool:
        """Whether the client's usage holds every round's (asked once the stream has ended)."""
        return self._summed == len(self._asker.tails)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        while True:
            async for batch in self._batches():
                out = b"".join([self._take(event) for event in batch])
                if out:
                    yield out
            if self._held is None:
                return
            out, goes_on = await self._go_on()
            if out:
                yield out
            if not goes_on:
                return

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        await self._response.aclose()
        if not self._finished and self._asker.tails:
            self._finished = True
            self._asker.session.finished(self._asker.tails)

    async def _batches(self) -> AsyncIterator[list[bytes]]:
        """The current answer's events, a batch per chunk received (the head first)."""
        head, self._head = self._head, []
        if head:
            yield head
        async for chunk in self._chunks:
            self._rest += self._decoder.decode(chunk)
            *complete, self._rest = EVENT_END.split(self._rest)
            if complete:
                yield complete[::2]  # each event, then its end
        rest, self._rest = self._rest, b""
        if rest.strip():
            yield [rest]

    def _take(self, event: bytes) -> bytes:
        """What to send the client for one event of the current answer (maybe nothing yet)."""
        if not self._watching:
            return self._relay(event)
        self._current.append(event)
        self._watched += len(event)
        if self._watched > _MAX_WATCHED_BYTES:
            return self._stop_watching(event)
        if self._held is not None:
            self._held.append(self._spliced(event) or b"")
            return b""
        sent = self._spliced(event)
        if sent is None:
            return b""
        if self._shape.call_marker in sent:
            data = sse_data(sent)
            if data is not None and self._shape.classify(data) == TOOL:
                self._held = [sent]
                return b""
        return self._relay(sent)

    def _spliced(self, event: bytes) -> bytes | None:
        """The event as the client must see it after a splice (None: dropped)."""
        if self._splice is None:
            return event
        data = sse_data(event)
        if data is None:
            return event
        continued = self._splice.continued(data)
        return None if continued is None else with_data(event, continued)

    def _relay(self, event: bytes) -> bytes:
        if not event:
            return b""
        rounds = len(self._asker.tails)
        summed = event_with_rounds(event, self._asker.usages()) if rounds else None
        if summed is not None:
            self._summed = rounds
            event = summed
        if self._watching:
            self._relayed.append(event)
        return event + b"\n\n"

    def _stop_watching(self, event: bytes) -> bytes:
        held = self._held or []
        self._held = None
        self._watching = False
        self._current, self._relayed = [], []
        if held:
            held.append(self._spliced(event) or b"")
            return b"".join(self._relay(e) for e in held)
        sent = self._spliced(event)
        return self._relay(sent) if sent is not None else b""

    async def _go_on(self) -> tuple[bytes, bool]:
        """The answer ended after a tool call: what to send, and whether another answer goes
        on. Its held events, or, when it called recall and a round is left, an SSE comment
        once the next answer is on its way (an error event when it is not)."""
        held, self._held = self._held or [], None
        events = [data for e in self._current if (data := sse_data(e)) is not None]
        reply = self._shape.read_stream(events)
        recalls = self._asker.recalls(reply)
        if not recalls or reply is None:
            strip = self._asker.leftover(reply)  # the rounds are spent: the client's calls only
            if strip is not None:
                held = [stripped(e, strip) for e in held]
            return b"".join(self._relay(e) for e in held), False
        relayed = [data for e in self._relayed if (data := sse_data(e)) is not None]
        tail = usage_events(events)
        await self._response.aclose()
        try:
            response = await self._asker.again(reply, recalls, tail)
        except ProxyError as error:
            return error_event(None, error.message), False
        decoder = Decoder.of(response.headers)
        if response.status != 200 or not decoder.readable:
            try:
                body = await response.read()
            except ProxyError:
                body = b""
            finally:
                await response.aclose()
            return error_event(body, f"The provider answered {response.status} to a recall."), False
        self._response, self._decoder = response, decoder
        self._chunks = response.iter_raw()
        self._current, self._watched = [], 0
        self._splice = self._shape.splice(relayed)
        return b": %s %d\n\n" % (protocol.RECALLS_BYTES, len(self._asker.tails)), True


def usage_events(events: list[dict[str, Any]]) -> bytes:
    """A stream's events as SSE text again, for the usage reader (only those with usage)."""
    kept = [e for e in events if usage_in(e)]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in kept)


def error_event(body: bytes | None, message: str) -> bytes:
    """An SSE ``error`` event: the provider's error object when ``body`` holds one, else
    ``message``; the openai and anthropic SDKs raise it to the caller."""
    data: Any = None
    if body:
        try:
            data = wirejson.loads_shallow(body)
        except ValueError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("error"), dict):
        data = {"type": "error", "error": {"type": "upstream_error", "message": message}}
    return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"
