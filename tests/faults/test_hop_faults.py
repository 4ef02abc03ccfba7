"""Faults at the proxy's own hop (issue 17), part of ``make test``: what a client's connection can
make the proxy hold or send. Real ``compaction-proxy serve`` processes; clients are raw sockets
where a client library would not send what is tested (an ``Expect`` it never follows with a body,
a request line of 100 KB). docs/faults.md ("Hop faults") lists the cases and their figures.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.faults.attacks import expect_without_body
from tests.faults.raw_provider import RawProvider
from tests.faults.replicas import Replica, proxy_config

MB2 = 2_000_000
TRANSPORTS = ["aiohttp", "httpx"]


def hop_config(upstream: str, *, transport: str, extra_upstream: str = "") -> str:
    return proxy_config(
        upstream=upstream,
        store="memory://",
        extra_upstream=f", transport: {transport}{extra_upstream}",
    )


@pytest.fixture
def raw_provider() -> Iterator[RawProvider]:
    with RawProvider() as provider:
        yield provider


def wait_until(condition: Callable[[], bool], *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def upload_as_curl(
    port: int, path: str, body: bytes, headers: dict[str, str]
) -> tuple[bytes, bytes]:
    """A ``POST`` the way curl sends one over 1 MiB: the head with ``Expect: 100-continue``,
    then up to 1 s waiting for ``100 Continue``, then the body regardless. Returns (what came
    before the body was sent, the final response), the response b"" if none came in 15 s."""
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head += "expect: 100-continue\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(head.encode())
        early = b""
        with contextlib.suppress(TimeoutError):  # curl's expect_100_timeout: send it anyway
            early = sock.recv(65536)
        if early and not early.startswith(b"HTTP/1.1 100"):
            return early, early  # a final answer before the body (a refusal)
        sock.sendall(body)
        sock.settimeout(15)
        response = b""
        try:
            while not _complete(response):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                response += chunk
        except TimeoutError:
            pass
        return early, response


def _complete(response: bytes) -> bool:
    head, sep, body = response.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return body.endswith(b"0\r\n\r\n")


def chat_body(size: int) -> bytes:
    text = "lorem ipsum dolor " * (size // 18)
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}).encode()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_expect_100_continue_is_answered_at_our_hop_and_not_forwarded(
    transport: str, raw_provider: RawProvider, start_serve: Callable[[str], Replica]
) -> None:
    """curl's 2 MB upload (``Expect: 100-continue``) to a pass-through route and to a compacted
    one, against a provider that never sends 100 and waits for the body: each is answered, the
    100 comes from the proxy, and the provider never sees the ``Expect``."""
    proxy = start_serve(hop_config(raw_provider.url, transport=transport))
    auth = {"authorization": "Bearer sk-hop-tests"}
    cases = [
        ("/v1/files", b"x" * MB2, {**auth, "content-type": "application/octet-stream"}),
        (
            "/v1/chat/completions",
            chat_body(MB2),
            {**auth, "content-type": "application/json", "x-conversation-id": "expect-2mb"},
        ),
    ]
    for path, body, headers in cases:
        started = time.monotonic()
        early, response = upload_as_curl(proxy.port, path, body, headers)
        took = time.monotonic() - started
        print(f"{transport} {path}: {response[:12]!r} in {took:.2f} s")
        assert early.startswith(b"HTTP/1.1 100 Continue"), (path, early)
        assert response.startswith(b"HTTP/1.1 200"), (path, response[:200])
    assert [seen.path for seen in raw_provider.received] == ["/v1/files", "/v1/chat/completions"]
    assert raw_provider.received[0].body_bytes == MB2
    for seen in raw_provider.received:
        assert "expect" not in seen.headers, seen.headers


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_clients_that_abandon_an_expect_upload_hold_no_upstream_connection(
    transport: str, raw_provider: RawProvider, start_serve: Callable[[str], Replica]
) -> None:
    """Twice as many ``Expect`` heads without a body as the upstream pool holds, then the
    clients leave: within a bounded wait the provider has no connection from the proxy open,
    and another client's request is answered."""
    proxy = start_serve(
        hop_config(raw_provider.url, transport=transport, extra_upstream=", max_connections: 4")
    )
    attack = expect_without_body(proxy.port, connections=8, hold_seconds=1.0)
    assert attack.connections == 8
    left = time.monotonic()
    released = wait_until(lambda: raw_provider.open_connections == 0, timeout=5)
    print(
        f"{transport}: {attack}; provider connections open "
        f"{raw_provider.open_connections} after {time.monotonic() - left:.2f} s"
    )
    assert released, f"{raw_provider.open_connections} upstream connections still held"
    response = httpx.get(
        f"{proxy.url}/v1/models", headers={"authorization": "Bearer sk-other"}, timeout=15
    )
    assert response.status_code == 200


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_that_leaves_while_the_provider_thinks_holds_no_upstream_connection(
    transport: str, raw_provider: RawProvider, start_serve: Callable[[str], Replica]
) -> None:
    proxy = start_serve(hop_config(raw_provider.url, transport=transport))
    raw_provider.answer_delay = 30.0
    for path, body in [("/v1/files", b"x" * 1000), ("/v1/chat/completions", chat_body(1000))]:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{proxy.url}{path}",
                content=body,
                headers={"authorization": "Bearer sk-hop-tests", "x-conversation-id": "thinks"},
                timeout=httpx.Timeout(10, read=0.5),
            )
        assert wait_until(lambda: raw_provider.open_connections == 0, timeout=3), path
    assert len(raw_provider.received) == 2


def test_a_100_kb_request_line_or_header_is_a_json_431(
    raw_provider: RawProvider, start_serve: Callable[[str], Replica]
) -> None:
    """Each head sent in one write, as a script would: a 100 KB request line was uvicorn's
    plain-text 400, a 100 KiB header (the head whole in one read) was forwarded."""
    proxy = start_serve(hop_config(raw_provider.url, transport="aiohttp"))
    heads = {
        "line": b"GET /v1/models?q=" + b"a" * 100_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n",
        "header": b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 102_400 + b"\r\n\r\n",
    }
    for name, head in heads.items():
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(head)
            response = b""
            with contextlib.suppress(ConnectionResetError, TimeoutError):
                while chunk := sock.recv(65536):
                    response += chunk
        head_part, _, body = response.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 431"), (name, response[:200])
        assert b"content-type: application/json" in head_part.lower()
        error = json.loads(body)["error"]
        assert error["code"] == "headers_too_large" and error["type"], error
    assert raw_provider.received == []
