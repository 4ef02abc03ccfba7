"""A body read whole already is relayed in one message, and its tail kept as if iterated."""

from __future__ import annotations

import gzip

import pytest

from proxy.proxying.relay import relay
from proxy.proxying.responses import TAIL_BYTES, BufferedResponse, ResponseTail
from proxy.server.access_log import Exchange

pytestmark = pytest.mark.anyio


async def test_a_whole_body_goes_out_in_one_message() -> None:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    exchange = Exchange()
    response = BufferedResponse(200, [(b"Content-Type", b"application/json")], b'{"a":1}')
    await relay(
        response, send, exchange, extra_headers=[(b"x-compaction", b"applied")], whole=response.body
    )
    assert sent == [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"x-compaction", b"applied")],
        },
        {"type": "http.response.body", "body": b'{"a":1}'},
    ]
    assert (exchange.status, exchange.responded, exchange.bytes_out) == (200, True, 7)


@pytest.mark.parametrize("coding", [None, b"gzip"])
@pytest.mark.parametrize("size", [0, 100, 3 * TAIL_BYTES])
async def test_a_whole_body_s_tail_is_the_iterated_one(coding: bytes | None, size: int) -> None:
    decoded = bytes(i % 251 for i in range(size))
    headers = [(b"content-encoding", coding)] if coding else []
    body = gzip.compress(decoded) if coding else decoded
    iterated = ResponseTail(BufferedResponse(200, headers, body))
    assert b"".join([chunk async for chunk in iterated.iter_raw()]) == body
    kept = ResponseTail(BufferedResponse(200, headers, body))
    kept.keep_whole(body)
    assert kept.tail() == iterated.tail()
    assert size == 0 or kept.tail()
