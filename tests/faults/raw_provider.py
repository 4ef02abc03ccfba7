"""A provider speaking HTTP/1.1 over plain asyncio streams, for what a framework's server hides.

uvicorn (under tests/support/mock_upstream.py) answers ``Expect: 100-continue`` by itself and keeps no
count of open sockets. Many real providers do neither: this one never sends ``100 Continue``, it
reads the whole body before it answers (so a client that waits for a 100 waits for ever), and it
counts the connections open to it, which is what a test needs to see what the proxy holds.

It answers every request with a small JSON body, after ``answer_delay`` seconds: a chat completion on ``/chat/completions``,
``{"bytes": N}`` elsewhere. Keep-alive is honoured. It runs its own event loop in a daemon thread
so sync tests can drive it; ``with RawProvider() as provider: ... provider.url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import dataclass

from tests.support.mock_upstream import completion
from tests.support.servers import free_port


@dataclass(frozen=True)
class Seen:
    """One request the provider read to its end."""

    method: str
    path: str
    headers: dict[str, str]  # lowercase names
    body_bytes: int


class RawProvider:
    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[Seen] = []
        self.accepted = 0
        self.answer_delay = 0.0  # seconds between a request's end and its answer
        self._open: set[asyncio.StreamWriter] = set()
        self._busy: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections open to the provider now (a request in progress or kept alive)."""
        return len(self._open)

    @property
    def in_flight(self) -> int:
        """Connections holding a request the provider has begun to read and not answered."""
        return len(self._busy)

    def __enter__(self) -> RawProvider:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._open.add(writer)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # the proxy closed or broke the connection: exactly what is counted
        finally:
            self._open.discard(writer)
            self._busy.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Read one request, answer it; False when the connection is to be closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed between requests
        self._busy.add(writer)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        size = await _read_body(reader, headers)  # no 100 Continue, whatever the client expects
        self.received.append(Seen(method, path, headers, size))
        if self.answer_delay:
            try:  # thinking, while watching for the proxy closing the connection
                await asyncio.wait_for(reader.read(1), timeout=self.answer_delay)
                return False
            except TimeoutError:
                pass
        if path.endswith("/chat/completions"):
            body = json.dumps(completion("ok")).encode()
        else:
            body = json.dumps({"bytes": size}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        self._busy.discard(writer)
        return headers.get("connection", "").lower() != "close"


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> int:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            length = int(line.split(b";")[0], 16)
            await reader.readexactly(length + 2)
            size += length
            if length == 0:
                return size
    length = int(headers.get("content-length", "0"))
    await reader.readexactly(length)
    return length
