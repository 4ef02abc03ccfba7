"""The floor of a pass-through on the proxy's own server: a minimal relay, as fast as it can be
while served the way the proxy is (uvicorn with the proxy's options: httptools, uvloop, the
connection guard), to compare with the proxy in ``bench_long --floor``.

No framework, no HTTP client library: the request head and body chunks are written to one
keep-alive connection to the upstream as they arrive, the answer (a Content-Length body, as the
benchmark's mock sends) read back and relayed. Not a proxy: no limits, no error handling, one
request at a time. Run: ``python -m tests.bench.relay_floor --port P --upstream-port M``.

``--client``: the same relay, sending through the proxy's own provider client (the configured
transport, aiohttp by default) instead of a raw socket: the floor of any pass-through that uses
that client, so that what the client costs is told apart from what the proxy's layers cost.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import uvicorn

from proxy.config.settings import Settings
from proxy.server.run import uvicorn_options
from proxy.upstream import UpstreamClient, open_upstream

HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding"}


async def serve_lifespan(
    receive: Any,
    send: Any,
    startup: Callable[[], None] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """ASGI's lifespan: ``startup`` once the loop runs, ``shutdown`` before it stops."""
    while True:
        kind = (await receive())["type"]  # lifespan.startup, then lifespan.shutdown
        if kind == "lifespan.startup" and startup is not None:
            startup()
        if kind == "lifespan.shutdown" and shutdown is not None:
            await shutdown()
        await send({"type": f"{kind}.complete"})
        if kind == "lifespan.shutdown":
            return


class Relay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port
            )
        reader, writer = self.reader, self.writer
        assert reader is not None
        head = [f"{scope['method']} {scope['path']} HTTP/1.1\r\nhost: 127.0.0.1\r\n".encode()]
        head += [
            name + b": " + value + b"\r\n" for name, value in scope["headers"] if name not in HOP
        ]
        writer.write(b"".join(head) + b"\r\n")
        more = True
        while more:
            message = await receive()
            writer.write(message.get("body", b""))
            more = message.get("more_body", False)
            await writer.drain()
        status = int((await reader.readline()).split()[1])
        headers, length = [], 0
        while (line := await reader.readline()) != b"\r\n":
            name, _, value = line.rstrip(b"\r\n").partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                length = int(value)
            if name not in HOP:
                headers.append((name, value))
        body = await reader.readexactly(length)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class ClientRelay:
    """The relay through the proxy's provider client: the body streamed to it as it arrives,
    the answer relayed as the client gives it."""

    def __init__(self, upstream_port: int) -> None:
        self.base = f"http://127.0.0.1:{upstream_port}"
        self.client: UpstreamClient | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            # The client is made in the running loop and closed with it, as the proxy's is.
            await serve_lifespan(receive, send, self._open, self._close)
            return
        assert self.client is not None, "opened at startup"

        async def body() -> AsyncIterator[bytes]:
            more = True
            while more:
                message = await receive()
                yield message.get("body", b"")
                more = message.get("more_body", False)

        headers = [(name, value) for name, value in scope["headers"] if name not in HOP]
        url = self.base + scope["path"]
        response = await self.client.send(scope["method"], url, headers, body())
        headers = [(name, value) for name, value in response.headers if name.lower() not in HOP]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        async for chunk in response.iter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        await response.aclose()

    def _open(self) -> None:
        self.client = open_upstream(Settings().upstream)

    async def _close(self) -> None:
        if self.client is not None:
            await self.client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--client", action="store_true", help="send through the proxy's client")
    args = parser.parse_args()
    options = uvicorn_options(Settings())
    app = (ClientRelay if args.client else Relay)(args.upstream_port)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", **options)


if __name__ == "__main__":
    main()
