"""Hostile clients, as reusable functions for the fault suite and the campaign (``make soak``).

Each drives raw sockets on loopback, is bounded (a fixed number of connections, a fixed time) and
closes everything it opened before it returns.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ExpectAttack:
    """What :func:`expect_without_body` saw."""

    connections: int  # opened and sent a head
    refused: int  # could not connect or send (the proxy's connection limit, a reset)
    continues: int  # were told "100 Continue" (the proxy reading the body, as it should)
    answered: int  # got a final status line before they left (a 408, a 503)


def expect_without_body(
    port: int,
    *,
    path: str = "/v1/files",
    connections: int = 300,
    body_bytes: int = 2_000_000,
    hold_seconds: float = 2.0,
    host: str = "127.0.0.1",
    extra_headers: tuple[tuple[str, str], ...] = (),
) -> ExpectAttack:
    """The Expect wedge: ``connections`` clients each send a request head announcing a
    ``body_bytes`` upload with ``Expect: 100-continue``, then send no body, wait ``hold_seconds``
    and leave (close). curl sends the same head by itself for any upload over 1 MiB; an attacker
    just never follows it with the body.

    A proxy that forwards the ``Expect`` and waits for the provider's ``100 Continue`` (which a
    provider that reads the body first never sends) holds one upstream connection per such
    client, for ever once the client has left: afterwards every route answers 504. A sound one
    answers the 100 itself, reads (waits for) the body within its own timeouts, and releases
    the upstream connection when the client leaves.
    """
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\nauthorization: Bearer sk-attacker\r\n"
        f"content-type: application/octet-stream\r\ncontent-length: {body_bytes}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in extra_headers)
        + "expect: 100-continue\r\n\r\n"
    ).encode()
    sockets: list[socket.socket] = []
    refused = continues = answered = 0
    try:
        for _ in range(connections):
            try:
                sock = socket.create_connection((host, port), timeout=5)
                sock.sendall(head)
            except OSError:
                refused += 1
                continue
            sock.setblocking(False)
            sockets.append(sock)
        deadline = time.monotonic() + hold_seconds
        seen = [b""] * len(sockets)
        while time.monotonic() < deadline:
            for i, sock in enumerate(sockets):
                with contextlib.suppress(BlockingIOError, OSError):
                    seen[i] += sock.recv(4096)
            time.sleep(0.05)
        for got in seen:
            if got.startswith(b"HTTP/1.1 100"):
                continues += 1
                got = got.split(b"\r\n\r\n", 1)[1]
            if got.startswith(b"HTTP/1.1 "):
                answered += 1
    finally:
        for sock in sockets:
            sock.close()
    return ExpectAttack(len(sockets), refused, continues, answered)


def main() -> None:
    """``python -m tests.faults.attacks [CONNECTIONS]``: the Expect wedge, measured. A fresh
    ``compaction-proxy serve`` (the default upstream pool of 256) in front of a provider that
    never sends 100 Continue; CONNECTIONS (300) attackers; then another client's request, and
    the provider's open connections from the proxy 10 s after the attackers left."""
    import sys
    import tempfile
    from pathlib import Path

    import httpx

    from tests.faults.raw_provider import RawProvider
    from tests.faults.replicas import Replica, proxy_config

    connections = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as workdir, RawProvider() as provider:
        proxy = Replica(proxy_config(provider=provider.url, store_url="memory://"), Path(workdir))
        try:
            attack = expect_without_body(proxy.port, connections=connections)
            left = time.monotonic()
            print(
                f"attack: {attack}; connections open to the provider: {provider.open_connections}"
            )
            started = time.monotonic()
            try:
                status = httpx.get(
                    f"{proxy.url}/v1/models", headers={"authorization": "Bearer sk-x"}, timeout=30
                ).status_code
            except httpx.TimeoutException:
                status = 0
            took = time.monotonic() - started
            print(f"another client's GET /v1/models: {status or 'no answer'} in {took:.3f} s")
            time.sleep(max(0.0, 10 - (time.monotonic() - left)))
            print(
                "10 s after the attackers left: requests in flight at the provider "
                f"{provider.in_flight}, connections open {provider.open_connections} "
                "(idle pooled ones included)"
            )
        finally:
            proxy.stop()


if __name__ == "__main__":
    main()
