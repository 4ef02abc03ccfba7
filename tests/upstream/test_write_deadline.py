"""The write deadline bounds the provider's taking of each piece of a body, nothing else: a
client slow between pieces, or a provider slow to answer a body it has read, is no timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from proxy.config.settings import UpstreamSettings
from proxy.upstream import open_upstream

pytestmark = pytest.mark.anyio

WRITE = 0.3  # the write deadline under test; every other timeout is long
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


class Answering:
    """Reads a whole request (a chunked or a Content-Length body), waits ``delay``, answers."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.received = b""

    async def __aenter__(self) -> Answering:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            body = await reader.readuntil(b"0\r\n\r\n")
        else:
            length = [line for line in head.lower().split(b"\r\n") if b"content-length" in line]
            body = await reader.readexactly(int(length[0].split(b":")[1]))
        self.received = body
        await asyncio.sleep(self.delay)
        writer.write(ANSWER)
        await writer.drain()
        writer.close()

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()


async def send(url: str, body: bytes | AsyncIterator[bytes]) -> bytes:
    settings = UpstreamSettings.model_validate(
        {"transport": "aiohttp", "timeouts": {"write": WRITE, "read": 30, "connect": 30}}
    )
    upstream = open_upstream(settings)
    try:
        async with asyncio.timeout(30):
            response = await upstream.send("POST", url + "/v1/files", [], body)
            assert response.status == 200
            return await response.read()
    finally:
        await upstream.aclose()


async def slow_client(pieces: int, gap: float) -> AsyncIterator[bytes]:
    for _ in range(pieces):
        await asyncio.sleep(gap)
        yield b"x" * 1000


async def test_a_client_slower_than_the_write_deadline_between_pieces_is_served() -> None:
    async with Answering() as provider:
        assert await send(provider.url, slow_client(3, 2 * WRITE)) == b"ok"
    assert provider.received.count(b"x" * 1000) == 3


@pytest.mark.parametrize(
    "body",
    [b"x" * 1000, b"x" * (300 << 10), "streamed"],
    ids=["small", "pieces", "streamed"],
)
async def test_a_provider_slow_to_answer_a_body_it_read_is_no_write_timeout(body) -> None:
    if body == "streamed":
        body = slow_client(2, 0)
    async with Answering(delay=3 * WRITE) as provider:
        assert await send(provider.url, body) == b"ok"
