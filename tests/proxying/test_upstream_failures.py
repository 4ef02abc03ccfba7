"""A provider that fails after its response headers were sent: the client gets an
unfinished response, /metrics counts an upstream failure (not a 200), and the log has one clear
line from us and nothing from uvicorn."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.support.config import config

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
FIRST = b'data: {"choices":[{"delta":{"content":"hel"}}]}\n\n'


class DroppingProvider:
    """A raw socket server (no uvicorn, so its logs cannot mix with the proxy's): answers every
    request with headers and one chunk, then closes the connection mid-body."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                conn.sendall(HEAD + b"%x\r\n%s\r\n" % (len(FIRST), FIRST))

    def close(self) -> None:
        self.sock.close()


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def dropping() -> Iterator[DroppingProvider]:
    provider = DroppingProvider()
    yield provider
    provider.close()


@pytest.mark.parametrize(
    ("path", "route", "headers"),
    [
        ("/v1/chat/completions", "chat", {"x-conversation-id": "c1"}),
        ("/v1/responses", "responses", {}),
        ("/v1/completions", "passthrough", {}),
    ],
)
def test_mid_stream_failure_is_an_upstream_failure_logged_once(
    dropping: DroppingProvider, start_proxy, path: str, route: str, headers: dict
) -> None:
    server = start_proxy(config(provider=dropping.url))
    ours, uvicorn = Records(), Records()
    logging.getLogger("proxy").addHandler(ours)
    logging.getLogger("uvicorn.error").addHandler(uvicorn)
    try:
        body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        request = {"authorization": "Bearer sk-a", **headers}
        with (
            pytest.raises(httpx.RemoteProtocolError),  # unfinished, never a clean end
            httpx.stream("POST", server.url + path, json=body, headers=request) as response,
        ):
            assert response.status_code == 200
            for _ in response.iter_raw():
                pass
        metrics = httpx.get(f"{server.url}/metrics").text
    finally:
        logging.getLogger("proxy").removeHandler(ours)
        logging.getLogger("uvicorn.error").removeHandler(uvicorn)
    assert f'proxy_upstream_failures_total{{route="{route}",stage="mid_response"}} 1.0' in metrics
    assert f'proxy_requests_total{{route="{route}",status="502"}} 1.0' in metrics
    assert f'route="{route}",status="200"' not in metrics
    warnings = [r for r in ours.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "mid-response" in warnings[0].getMessage()
    assert warnings[0].exc_info is None
    assert [r.getMessage() for r in uvicorn.records if r.levelno >= logging.WARNING] == []
