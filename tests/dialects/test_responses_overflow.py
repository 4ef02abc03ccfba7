"""A streamed Responses answer that fails with ``context_length_exceeded`` after its opening
events is an overflow (OpenAI answers 200, ``response.created``, then ``response.failed``); any
other stream is decided by its first event, or by the end of the hold, and relayed whole, held
bytes first."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.proxying.overflow import look_for_overflow


class Stream:
    """An upstream response that yields ``chunks`` (a float: a pause, in seconds) and remembers
    how many were read."""

    def __init__(self, chunks: list[bytes | float], headers: list | None = None) -> None:
        self.status = 200
        self.headers = [(b"content-type", b"text/event-stream"), *(headers or [])]
        self.chunks = chunks
        self.read_count = 0
        self.closed = False

    async def iter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if isinstance(chunk, float):
                await asyncio.sleep(chunk)
                continue
            self.read_count += 1
            yield chunk

    async def read(self) -> bytes:
        return b"".join(c for c in self.chunks if isinstance(c, bytes))

    async def aclose(self) -> None:
        self.closed = True


def event(name: str, data: dict[str, Any], *, named: bool = True) -> bytes:
    line = f"event: {name}\n" if named else ""
    return f"{line}data: {json.dumps({'type': name, **data})}\n\n".encode()


CREATED = event("response.created", {"response": {"status": "in_progress", "error": None}})
OVERFLOW = {"code": "context_length_exceeded", "message": "Your input exceeds the context window"}


def decide(
    chunks: list[bytes | float], *, hold: float = 5.0, headers: list | None = None
) -> tuple[bool, int, bytes]:
    """(overflowed, chunks read to decide, what the client would get relayed)."""

    async def run() -> tuple[bool, int, bytes]:
        look = await look_for_overflow(stream, streaming=True, hold_seconds=hold)
        held = stream.read_count
        relayed = b"".join([c async for c in look.response.iter_raw()])
        await look.response.aclose()
        return look.overflowed, held, relayed

    stream = Stream(chunks, headers)
    return asyncio.run(run())


@pytest.mark.parametrize("named", [True, False])
def test_a_failed_event_after_the_opening_ones_is_an_overflow(named: bool) -> None:
    failed = event(
        "response.failed", {"response": {"status": "failed", "error": OVERFLOW}}, named=named
    )
    in_progress = event("response.in_progress", {"response": {}}, named=named)
    chunks = [CREATED[:20], CREATED[20:] + in_progress, failed, b"never read"]
    overflowed, held, relayed = decide(chunks)
    assert overflowed
    assert held == 3
    assert relayed == b"".join(chunks)  # if it cannot be retried, the client still gets it all


def test_an_error_event_is_read_by_its_own_code() -> None:
    overflowed, _, _ = decide([CREATED, event("error", OVERFLOW)])
    assert overflowed


def test_other_failures_and_answers_are_relayed_from_their_first_event() -> None:
    limited = {"code": "rate_limit_exceeded", "message": "slow down"}
    failed = event("response.failed", {"response": {"error": limited}})
    delta = event("response.output_text.delta", {"delta": "context window"})
    # Instructions that talk about context windows are not an error.
    talk = event("response.created", {"response": {"instructions": "mind the context window"}})
    for chunks in (
        [CREATED, failed],
        [CREATED, delta, b"rest"],
        [talk, event("response.output_item.added", {}), b"rest"],
    ):
        overflowed, held, relayed = decide(chunks)
        assert not overflowed
        assert held == 2  # decided by the first event after the opening one
        assert relayed == b"".join(chunks)


def test_a_chat_stream_is_decided_by_its_first_event() -> None:
    chunk = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    assert decide([chunk, b"data: [DONE]\n\n"]) == (False, 1, chunk + b"data: [DONE]\n\n")
    comment = b": OPENROUTER PROCESSING\n\n"
    assert decide([comment, chunk]) == (False, 1, comment + chunk)


def test_an_empty_stream_is_still_an_overflow() -> None:
    assert decide([]) == (True, 0, b"")


def test_the_opening_events_are_held_no_longer_than_the_hold() -> None:
    """A reasoning model thinks before its first output: past the hold, what came is relayed,
    the read under way goes on, and nothing is lost or read twice."""
    output = event("response.output_item.added", {})
    chunks: list[bytes | float] = [CREATED, 1.0, output, b"rest"]
    started = time.monotonic()
    overflowed, held, relayed = decide(chunks, hold=0.1)
    assert not overflowed and held == 1
    assert relayed == CREATED + output + b"rest"
    assert time.monotonic() - started >= 1.0  # the relay waited for the rest


def test_a_failure_within_the_hold_is_seen_in_a_compressed_stream() -> None:
    failed = event("response.failed", {"response": {"status": "failed", "error": OVERFLOW}})
    compressor = zlib.compressobj(wbits=31)
    pieces = [
        compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in (CREATED, failed)
    ]
    pieces.append(compressor.flush())
    overflowed, held, relayed = decide(pieces, headers=[(b"content-encoding", b"gzip")])
    assert overflowed and held == 2
    assert relayed == b"".join(pieces)  # the provider's bytes, still compressed


def test_no_hold_reads_nothing() -> None:
    assert decide([CREATED, b"rest"], hold=0) == (False, 0, CREATED + b"rest")


def test_a_client_gone_during_the_hold_ends_the_read_and_the_response() -> None:
    async def run() -> Stream:
        stream = Stream([CREATED, 30.0, b"never"])
        task = asyncio.ensure_future(look_for_overflow(stream, streaming=True, hold_seconds=10))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return stream

    stream = asyncio.run(run())
    assert stream.closed and stream.read_count == 1
