"""A streamed Responses answer that fails with ``context_length_exceeded`` after its opening
events is an overflow (OpenAI answers 200, ``response.created``, then ``response.failed``); any
other stream is decided by its first event and relayed whole, held bytes first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.overflow import look_for_overflow


class Stream:
    """An upstream response that yields ``chunks`` and remembers how many were read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.status = 200
        self.headers = [(b"content-type", b"text/event-stream")]
        self.chunks = chunks
        self.read_count = 0
        self.closed = False

    async def iter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read_count += 1
            yield chunk

    async def read(self) -> bytes:
        return b"".join(self.chunks)

    async def aclose(self) -> None:
        self.closed = True


def event(name: str, data: dict[str, Any], *, named: bool = True) -> bytes:
    line = f"event: {name}\n" if named else ""
    return f"{line}data: {json.dumps({'type': name, **data})}\n\n".encode()


CREATED = event("response.created", {"response": {"status": "in_progress", "error": None}})
OVERFLOW = {"code": "context_length_exceeded", "message": "Your input exceeds the context window"}


def decide(chunks: list[bytes]) -> tuple[bool, int, bytes]:
    """(overflowed, chunks read to decide, what the client would get relayed)."""

    async def run() -> tuple[bool, int, bytes]:
        overflowed, response = await look_for_overflow(stream, streaming=True)
        held = stream.read_count
        relayed = b"".join([c async for c in response.iter_raw()])
        return overflowed, held, relayed

    stream = Stream(chunks)
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
