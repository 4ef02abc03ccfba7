"""The usage a client gets after recall rounds (docs/recall.md): the final call's, with
each round's top-level usage numbers added (``prompt_tokens``/``input_tokens``,
``completion_tokens``/``output_tokens``, ``total_tokens``, cache counts: whichever the final
usage has). A whole answer's ``usage`` is rewritten; in a stream, each event carrying usage (a
chat chunk's ``usage``, Responses' ``response.usage``, Anthropic's ``message.usage`` and
``message_delta``'s ``usage``) is rewritten as it passes, the other events go out as they came.
What is relayed is then decoded: its ``Content-Encoding`` and ``Content-Length`` are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from proxy import wirejson
from proxy.compaction.dialect.recall import CallStrip
from proxy.proxying.responses import BufferedResponse
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import Decoder

EVENT_END = re.compile(rb"(\r?\n\r?\n)")  # captured: re.split keeps each event's end
_DECODED_DROPS = frozenset({b"content-encoding", b"content-length"})


def round_usage(tail: bytes) -> dict[str, int]:
    """A round's usage numbers from its decoded answer: a whole JSON body, or the SSE events
    that carry usage (a later event's figure replaces an earlier one's: Anthropic's
    ``message_delta`` states the final output count)."""
    try:
        whole = wirejson.loads_shallow(tail)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return _ints(usage_in(whole))
    found: dict[str, int] = {}
    for event in EVENT_END.split(tail)[::2]:
        data = sse_data(event)
        if data is not None:
            found.update(_ints(usage_in(data)))
    return found


def event_with_rounds(event: bytes, rounds: list[dict[str, int]]) -> bytes | None:
    """One SSE event with the rounds' usage added to the usage it carries; None when it
    carries none (most events: only those naming ``"usage"`` are parsed)."""
    if b'"usage"' not in event:
        return None
    data = sse_data(event)
    usage = usage_in(data) if data is not None else None
    if data is None or usage is None:
        return None
    add_rounds(usage, rounds)
    return with_data(event, data)


def add_rounds(usage: dict[str, Any], rounds: list[dict[str, int]]) -> None:
    """Add the rounds' numbers to ``usage`` in place, for the integer keys it has."""
    for extra in rounds:
        for key, value in extra.items():
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool):
                usage[key] += value


def body_with_rounds(
    final: UpstreamResponse,
    decoded: bytes,
    rounds: list[dict[str, int]],
    strip: CallStrip | None = None,
) -> tuple[UpstreamResponse, bool]:
    """The whole final answer with the rounds' usage added and, with ``strip``, its recall calls
    taken out; and whether its usage holds the rounds' (it has one). Unreadable: as it is."""
    try:
        body = wirejson.loads_shallow(decoded)
    except ValueError:
        return final, False
    usage = usage_in(body) if isinstance(body, dict) else None
    if usage is None and (strip is None or not isinstance(body, dict)):
        return final, False
    if usage is not None:
        add_rounds(usage, rounds)
    if strip is not None:
        body = strip.whole(body)
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = decoded_headers(final.headers)
    headers.append((b"content-length", str(len(data)).encode()))
    return BufferedResponse(final.status, headers, data), usage is not None


class StreamWithRounds:
    """A streamed final answer relayed event by event, its usage events with the rounds added
    and, with ``strip``, its recall calls taken out."""

    def __init__(
        self,
        response: UpstreamResponse,
        rounds: list[dict[str, int]],
        strip: CallStrip | None = None,
    ) -> None:
        self._response = response
        self._rounds = rounds
        self._strip = strip
        self._decoder = Decoder.of(response.headers)
        self.status = response.status
        self.headers = decoded_headers(response.headers)
        self._summed = False  # an event's usage was rewritten

    def summed(self) -> bool:
        """Whether the stream's usage holds the rounds' (a chat stream without
        ``stream_options.include_usage`` has no usage to add them to)."""
        return self._summed

    async def iter_raw(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self._response.iter_raw():
            pending += self._decoder.decode(chunk)
            parts = EVENT_END.split(pending)
            pending = parts.pop()  # what follows the last complete event
            out = b"".join(
                kept + end
                for event, end in zip(parts[::2], parts[1::2], strict=True)
                if (kept := self._rewritten(event))
            )
            if out:
                yield out
        if pending:
            yield self._rewritten(pending)

    def _rewritten(self, event: bytes) -> bytes:
        if self._strip is not None:
            event = stripped(event, self._strip)
            if not event:
                return b""
        summed = event_with_rounds(event, self._rounds)
        if summed is None:
            return event
        self._summed = True
        return summed

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        await self._response.aclose()


def stripped(event: bytes, strip: CallStrip) -> bytes:
    """One SSE event with its recall calls taken out; empty: the event goes."""
    data = sse_data(event)
    if data is None:
        return event
    kept = strip.continued(data)
    return b"" if kept is None else with_data(event, kept)


def decoded_headers(headers: RawHeaders) -> RawHeaders:
    return [(k, v) for k, v in headers if k.lower() not in _DECODED_DROPS]


def with_data(event: bytes, data: dict[str, Any]) -> bytes:
    """``event`` with its ``data:`` lines replaced by ``data`` (its other lines kept)."""
    kept = [line for line in event.splitlines() if not line.startswith(b"data:")]
    try:
        encoded = orjson.dumps(data)
    except TypeError:  # an integer beyond 64 bits
        encoded = json.dumps(data, ensure_ascii=False).encode()
    return b"\n".join([*kept, b"data: " + encoded])


def sse_data(event: bytes) -> dict[str, Any] | None:
    """The JSON object of one SSE event's ``data:`` lines, or None ([DONE], comments)."""
    if event.startswith(b"data:") and b"\n" not in event:  # a chat chunk: one line
        text = event[5:]
    else:
        text = b"\n".join(line[5:] for line in event.splitlines() if line.startswith(b"data:"))
    if not text.strip():
        return None
    try:
        # Bounded: what is parsed here may be written again, and a provider may nest its
        # answer past what a JSON writer can descend (then it is relayed as it came).
        data = wirejson.loads_shallow(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def usage_in(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The usage object of a body or an event: its own, or its response's or message's."""
    for holder in (data, data.get("response"), data.get("message")):
        usage = holder.get("usage") if isinstance(holder, Mapping) else None
        if isinstance(usage, dict):
            return usage
    return None


def _ints(usage: Mapping[str, Any] | None) -> dict[str, int]:
    if usage is None:
        return {}
    return {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
