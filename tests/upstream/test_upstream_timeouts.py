"""Every wait on the provider is bounded, in both upstream clients: a provider that
does not take the request body (write), does not answer (read), or whose every pooled connection
is busy (pool) costs a 504, never a request held for ever. The provider is a raw asyncio server
on loopback that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest

from proxy.config.settings import UpstreamSettings
from proxy.errors import UpstreamTimeout
from proxy.upstream import open_upstream

pytestmark = pytest.mark.anyio

TRANSPORTS = ["aiohttp", "httpx"]
BOUND = 0.5  # every timeout of the client under test
SLACK = 5.0  # what a loaded machine may add before the timeout shows


class Provider:
    """Accepts connections; ``reads`` says whether it reads what it is sent. It never answers.
    Its receive buffer is small, so a body it does not read soon fills the path to it."""

    def __init__(self, *, reads: bool) -> None:
        self.reads = reads
        self.connections = 0
        self.connected = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Provider:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited when accepted
        sock.bind(("127.0.0.1", 0))
        self._server = await asyncio.start_server(self._serve, sock=sock)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.connected.set()
        self._writers.append(writer)
        if self.reads:
            while await reader.read(65536):
                pass

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()


def settings(transport: str, **timeouts: float) -> UpstreamSettings:
    bounds = {"connect": BOUND, "read": BOUND, "write": BOUND, "pool": BOUND, **timeouts}
    return UpstreamSettings.model_validate(
        {"transport": transport, "timeouts": bounds, "max_connections": 1}
    )


async def slow_body(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), 65536):
        yield data[start : start + 65536]


async def send_within(transport: str, url: str, body, **timeouts: float) -> float:
    """Send one POST; assert it ends in UpstreamTimeout; return the seconds it took."""
    upstream = open_upstream(settings(transport, **timeouts))
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamTimeout):
            async with asyncio.timeout(BOUND + SLACK):
                response = await upstream.send("POST", url + "/v1/files", [], body)
                await response.read()
    finally:
        await upstream.aclose()
    return time.monotonic() - started


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("streamed", [False, True], ids=["bytes", "streamed"])
async def test_a_provider_that_does_not_read_the_body_is_a_timeout(
    transport: str, streamed: bool
) -> None:
    data = b"x" * (16 << 20)  # far more than the socket buffers on the way hold
    async with Provider(reads=False) as provider:
        body = slow_body(data) if streamed else data
        # The read timeout is long: only the write timeout can end this.
        took = await send_within(transport, provider.url, body, read=60)
    assert took >= BOUND


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_provider_that_never_answers_is_a_timeout(transport: str) -> None:
    async with Provider(reads=True) as provider:
        took = await send_within(transport, provider.url, b"{}", write=60)
    assert took >= BOUND


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_waiting_for_a_pooled_connection_is_a_timeout(transport: str) -> None:
    async with Provider(reads=True) as provider:
        upstream = open_upstream(settings(transport, read=60))
        try:
            first = asyncio.create_task(upstream.send("POST", provider.url, [], b"{}"))
            await provider.connected.wait()
            started = time.monotonic()
            with pytest.raises(UpstreamTimeout):
                async with asyncio.timeout(2 * BOUND + SLACK):
                    await upstream.send("POST", provider.url, [], b"{}")
            assert time.monotonic() - started >= BOUND
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
        finally:
            await upstream.aclose()
