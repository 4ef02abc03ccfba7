"""A small TCP proxy on loopback that injects network faults between a client and a server.

Put it between the compaction proxy and its redis-server (or the provider) and switch its mode
while traffic flows:

- ``pass``: bytes go through unchanged.
- ``delay``: every chunk waits ``delay`` seconds before it goes on (a slow or far network).
- ``blackhole``: connections stay open but nothing goes through in either direction, and new
  connections are accepted and never answered (a partition, a firewall dropping packets).
- ``reset``: every connection, open or new, is aborted with a TCP RST (a crash, a load balancer
  dropping its table).

It runs its own event loop in a daemon thread so sync tests can drive it; ``mode`` and ``delay``
are plain attributes read by that loop on every chunk, so a switch takes effect at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Literal

from tests.support.servers import free_port

Mode = Literal["pass", "delay", "blackhole", "reset"]
CHUNK = 65536


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST rather than a FIN: SO_LINGER with a zero timeout, then close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """``127.0.0.1:port`` forwards to ``127.0.0.1:target`` under the current ``mode``."""

    def __init__(self, target: int, *, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.mode: Mode = "pass"
        self.delay = 0.0
        self.accepted = 0
        self.resets = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def set(self, mode: Mode, *, delay: float = 0.0) -> None:
        """Switch mode; ``reset`` also aborts every connection open now."""
        self.delay = delay
        self.mode = mode
        if mode == "reset":
            self._loop.call_soon_threadsafe(self._reset_all)

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            self.resets += 1
            _abort(writer)
        self._writers.clear()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                if self.mode != "blackhole":
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                return
            if self.mode == "reset":
                raise ConnectionResetError("fault proxy in reset mode")
            if self.mode == "blackhole":
                continue  # swallowed: the other side waits for an answer that never comes
            if self.mode == "delay" and self.delay:
                await asyncio.sleep(self.delay)
            writer.write(data)
            await writer.drain()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode == "reset":
            self.resets += 1
            _abort(client_w)
            return
        self._writers.add(client_w)
        server_w: asyncio.StreamWriter | None = None
        try:
            if self.mode == "blackhole":
                # Accepted, never connected onwards: drain and drop until the mode changes.
                while self.mode == "blackhole":
                    if not await client_r.read(CHUNK):
                        return
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
            self._writers.add(server_w)
            up = asyncio.create_task(self._pump(client_r, server_w))
            down = asyncio.create_task(self._pump(server_r, client_w))
            done, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_EXCEPTION)
            if any(t.exception() for t in done):
                for task in pending:
                    task.cancel()
                _abort(client_w)
                _abort(server_w)
            else:
                await asyncio.gather(*pending, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            _abort(client_w)
        finally:
            self._writers.discard(client_w)
            if server_w is not None:
                self._writers.discard(server_w)
                server_w.close()
            client_w.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._reset_all()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0.05)  # the aborted transports' callbacks close their sockets

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
