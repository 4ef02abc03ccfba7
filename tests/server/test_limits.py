"""Limits and denial of service: bounds on what one client can make the proxy hold.

Every proxy here is started the way ``compaction-proxy serve`` starts it (the same uvicorn
options and protocol, ``proxy.server.run.uvicorn_options``); clients are raw sockets where the point
is a misbehaving client, so the tests see exactly what went over the wire.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from proxy.config.settings import Settings
from tests.support.clients import openai_client
from tests.support.config import COMPACTING, EVERY_THREE_INTERACTIONS, config
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import wait_until

MIB = 1 << 20


def connect(server: ThreadedUvicorn, *, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket) -> bytes:
    """Everything the proxy sends until it closes the connection (or stops for 10 s)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def status_of(response: bytes) -> int | None:
    if not response.startswith(b"HTTP/1.1 "):
        return None
    return int(response[9:12])


# --- slow and greedy clients: bounds set at the server (proxy/server/guard.py) ---------------------

FAST = {"header_timeout_seconds": 1, "body_idle_timeout_seconds": 1}
PROTOCOLS = ["httptools", "h11"]


def served(mock: MockUpstream, start_proxy, server: dict = FAST, **options: object):
    return start_proxy(config(provider=mock.url, server=server), **options)


def healthy(server: ThreadedUvicorn) -> bool:
    import httpx

    return httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("http", PROTOCOLS)
def test_slowloris_headers_are_cut_off_at_the_deadline(
    mock: MockUpstream, start_proxy, http: str
) -> None:
    server = served(mock, start_proxy, http=http)
    header = b"x-slow: " + b"a" * 60
    closed = False
    with connect(server, timeout=0.25) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        for byte in header[:40]:  # one byte every 0.25 s: 10 s at most, the deadline is 1 s
            try:
                sock.sendall(bytes([byte]))
                data = sock.recv(65536)
            except TimeoutError:
                assert healthy(server)  # everyone else is served meanwhile
                continue
            except (BrokenPipeError, ConnectionResetError):
                data = b""
            closed = True
            break
    assert closed
    assert data == b"" or status_of(data) == 408


@pytest.mark.parametrize("http", PROTOCOLS)
def test_silent_connection_is_closed_at_the_header_deadline(
    mock: MockUpstream, start_proxy, http: str
) -> None:
    server = served(mock, start_proxy, http=http)
    with connect(server, timeout=10) as sock:
        response = read_response(sock)  # returns when the proxy closes, or after 10 s
    assert status_of(response) == 408
    assert b"request_timeout" in response


@pytest.mark.parametrize("http", PROTOCOLS)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files"])
def test_stalled_body_is_408_and_nothing_is_forwarded(
    mock: MockUpstream, start_proxy, path: str, http: str
) -> None:
    server = served(mock, start_proxy, http=http)
    with connect(server) as sock:
        # 1000 bytes announced, 2 sent: without a bound the proxy waits for the rest forever.
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n".encode()
            + b"x-conversation-id: c1\r\ncontent-length: 1000\r\n\r\n{}"
        )
        response = read_response(sock)
    assert status_of(response) == 408
    assert b'"type": "invalid_request_error"' in response
    assert b"request_timeout" in response
    assert mock.received == []
    assert healthy(server)


def test_slow_but_steady_body_is_served(mock: MockUpstream, start_proxy) -> None:
    server = served(mock, start_proxy)  # body_idle_timeout_seconds: 1
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    with connect(server) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
            + b"\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        for i in range(0, len(body), 10):  # 2.8 s in all, never idle for 1 s
            sock.sendall(body[i : i + 10])
            time.sleep(0.4)
        response = read_response(sock)
    assert status_of(response) == 200
    assert mock.received[0].body == body


@pytest.mark.parametrize("http", PROTOCOLS)
def test_oversized_header_is_refused_early(mock: MockUpstream, start_proxy, http: str) -> None:
    server = served(mock, start_proxy, {"max_header_bytes": 16384}, http=http)
    piece = b"a" * 65536
    sent = 0
    with connect(server) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
            while sent < 128 * MIB:  # stops as soon as the proxy closes the connection
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = read_response(sock)
    assert sent < 16 * MIB  # refused after a few reads, not after 128 MB
    assert response == b"" or status_of(response) == 431
    assert healthy(server)


def head_of(size: int, *, where: str) -> bytes:
    """A GET head of exactly ``size`` bytes, its padding in the request line or in a header."""
    if where == "line":
        start, end = b"GET /v1/models?pad=", b" HTTP/1.1\r\nhost: x\r\n\r\n"
    else:
        start, end = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


@pytest.mark.parametrize("http", PROTOCOLS)
@pytest.mark.parametrize("where", ["line", "header"])
@pytest.mark.parametrize("pieces", [1, 7], ids=["one-read", "pieces"])
def test_a_head_over_the_limit_is_a_json_431_however_it_arrives(
    mock: MockUpstream, start_proxy, http: str, where: str, pieces: int
) -> None:
    """A head that arrived whole in one read was not counted (a 100 KiB header got a
    200), and a long request line got the parser's plain-text 400."""
    server = served(mock, start_proxy, {"max_header_bytes": 65536}, http=http)
    for size, status in [(65536, 200), (65537, 431), (100_000, 431), (300_000, 431)]:
        head = head_of(size, where=where)
        step = -(-len(head) // pieces)
        with connect(server) as sock:
            try:
                for start in range(0, len(head), step):
                    sock.sendall(head[start : start + step])
                    time.sleep(0.01 if pieces > 1 else 0)
            except (BrokenPipeError, ConnectionResetError):
                pass
            response = read_response(sock) if status == 431 else sock.recv(65536)
        assert status_of(response) == status, (size, response[:200])
        if status == 431:
            error = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
            assert error["code"] == "headers_too_large"
    assert [r.path for r in mock.received] == ["/v1/models"]


@pytest.mark.parametrize("http", PROTOCOLS)
def test_a_request_line_past_64_kib_is_a_json_431_even_under_a_larger_limit(
    mock: MockUpstream, start_proxy, http: str
) -> None:
    """Both parsers refuse a request target past 64 KiB with their own plain-text 400."""
    server = served(mock, start_proxy, {"max_header_bytes": 262144}, http=http)
    for where, size, status in [
        ("header", 200_000, 200),
        ("line", 65535, 200),
        ("line", 70_000, 431),
    ]:
        with connect(server) as sock:
            sock.sendall(head_of(size, where=where))
            response = read_response(sock) if status == 431 else sock.recv(65536)
        assert status_of(response) == status, (where, size, response[:200])
    error = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "headers_too_large"


def test_header_under_the_limit_is_served(mock: MockUpstream, start_proxy) -> None:
    import httpx

    server = served(mock, start_proxy, {"max_header_bytes": 16384})
    response = httpx.get(f"{server.url}/v1/models", headers={"x-big": "a" * 12000})
    assert response.status_code == 200
    assert mock.received[0].headers["x-big"] == "a" * 12000


def test_connections_over_the_limit_are_refused_and_logged_once(
    mock: MockUpstream, start_proxy, caplog: pytest.LogCaptureFixture
) -> None:
    server = served(mock, start_proxy, {"max_connections": 4, "header_timeout_seconds": 2})
    idle = [connect(server) for _ in range(3)]  # silent clients holding connections
    try:
        assert healthy(server)  # under the limit: served
        idle += [connect(server) for _ in range(2)]  # the limit is reached
        for _ in range(3):  # over it: an immediate 503, not a hang
            with connect(server) as sock:
                response = read_response(sock)
            assert status_of(response) == 503
            assert b"server_error" in response
        # The silent clients are closed at the header deadline: service resumes by itself.
        assert wait_until(lambda: served_again(server), timeout=10)
    finally:
        for sock in idle:
            sock.close()
    refusals = [r for r in caplog.records if "server.max_connections" in r.getMessage()]
    assert len(refusals) == 1  # once per burst, not once per connection


def served_again(server: ThreadedUvicorn) -> bool:
    import httpx

    try:
        return httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


# --- max_body_bytes on pass-through routes --------------------------------------------------


def test_passthrough_content_length_over_limit_is_413_before_forwarding(
    mock: MockUpstream, start_proxy
) -> None:
    server = start_proxy(config(provider=mock.url, server={"max_body_bytes": MIB}))
    with connect(server) as sock:
        # Only the head: the proxy must answer without waiting for (or forwarding) 33 MB.
        sock.sendall(
            b"POST /v1/files HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\n"
            + b"content-length: %d\r\n\r\n" % (33 * MIB)
        )
        response = read_response(sock)
    assert status_of(response) == 413
    assert b'"code":"body_too_large"' in response.replace(b" ", b"")
    assert mock.received == []
    assert mock.disconnects == []  # nothing was even started towards the provider


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_passthrough_chunked_body_growing_past_limit_is_aborted(
    mock: MockUpstream, start_proxy, transport: str
) -> None:
    server = start_proxy(
        config(provider=mock.url, server={"max_body_bytes": MIB}, upstream={"transport": transport})
    )
    piece = b"y" * 65536
    with connect(server) as sock:
        sock.sendall(b"POST /v1/files HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        # 1.06 MiB, just past the 1 MiB limit; the body never ends. No more is sent after the
        # limit: a write after the proxy's close would draw a reset that can race the 413.
        for _ in range(17):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        response = read_response(sock)
    assert status_of(response) == 413
    assert b"body_too_large" in response
    # The provider saw an upload start and be aborted, never a complete request.
    assert wait_until(lambda: len(mock.disconnects) == 1)
    assert mock.received == []


def test_passthrough_body_under_limit_still_streams(mock: MockUpstream, start_proxy) -> None:
    import httpx

    server = start_proxy(config(provider=mock.url, server={"max_body_bytes": MIB}))
    body = b"z" * MIB  # exactly the limit
    response = httpx.post(f"{server.url}/v1/files", content=iter([body[:1000], body[1000:]]))
    assert response.status_code == 200
    assert mock.received[0].body == body


# --- overflow detection reads a bounded prefix of an error body -----------------------------

# Summarizes only to rescue an overflow: the trigger never fires in these tests.
NEVER = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"interactions": 100, "context_fraction": 0},
}


def test_large_error_body_is_relayed_intact_without_being_held(
    mock: MockUpstream, start_proxy
) -> None:
    import httpx

    from tests.support.mock_upstream import Reply

    server = start_proxy(config(COMPACTING, provider=mock.url, policies={"default": NEVER}))
    head = b'{"error": {"message": "' + b"a" * (256 * 1024)
    tail = b"b" * (2 * MIB) + b'", "type": "invalid_request_error"}}'
    # The provider sends a quarter MiB, then waits before the rest: a proxy that reads the whole
    # error body before relaying it makes the client wait too.
    mock.push(
        Reply(status=400, headers=[("content-type", "application/json")], chunks=[head, 1.0, tail])
    )
    received = b""
    first_at = None
    with httpx.stream(
        "POST",
        f"{server.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-conversation-id": "conv-big-error", "authorization": "Bearer k"},
        timeout=10,
    ) as response:
        assert response.status_code == 400
        for chunk in response.iter_raw():
            received += chunk
            if first_at is None and len(received) >= 128 * 1024:
                first_at = time.monotonic()
    assert received == head + tail
    assert first_at is not None and first_at < mock.chunk_times[-1]
    assert len(mock.chat_requests()) == 1  # not an overflow: no retry


def test_overflow_error_is_still_recognised(mock: MockUpstream, start_proxy) -> None:

    from tests.support.provider import SYSTEM, Provider, take_turn

    provider = Provider(mock)
    server = start_proxy(config(COMPACTING, provider=mock.url, policies={"default": NEVER}))
    client = openai_client(server, "conv-overflow", key="sk-x")
    history = [SYSTEM]
    for turn in range(5):
        take_turn(client, history, f"Step {turn}")
    provider.max_messages = 8
    history.append({"role": "user", "content": "one more"})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    assert raw.parse().choices[0].message.content.startswith("done")
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"


# --- summary and record sizes ----------------------------------------------------------------


def runaway_summarizer(mock: MockUpstream, summary: bytes, *, piece: int = 65536) -> None:
    """The provider writes summaries of ``summary``'s size (sent in pieces, so a reader that
    gives up can be seen as a disconnect); everything else is the usual echo."""
    from tests.support.mock_upstream import Reply, default_reply

    def reply(request):
        if request.path.endswith("/chat/completions") and b"mock-summarizer" in request.body:
            body = (
                b'{"id":"s","object":"chat.completion","created":0,"model":"mock-summarizer",'
                b'"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",'
                b'"content":"' + summary + b'"}}]}'
            )
            pieces: list[bytes | float] = []
            for i in range(0, len(body), piece):
                pieces += [body[i : i + piece], 0.001]
            return Reply(headers=[("content-type", "application/json")], chunks=pieces)
        return default_reply(request)

    mock.default = reply


def run_conversation(server: ThreadedUvicorn, turns: int) -> list:
    client = openai_client(server, "conv-runaway", key="sk-x")
    history = [{"role": "system", "content": "You are terse."}]
    answers = []
    for turn in range(turns):
        # Turns long enough that a (capped) summary is smaller than what it replaces, so it
        # applies: a summary that is not smaller is not applied.
        history.append({"role": "user", "content": f"step {turn}: " + "details " * 800})
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
        answer = raw.parse().choices[0].message.content
        answers.append((raw.headers.get("x-compaction"), answer))
        history.append({"role": "assistant", "content": answer})
    return answers


def stored_values(redis_url: str) -> dict[bytes, int]:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        return {
            key: client.strlen(key) for key in client.scan_iter() if client.type(key) == b"string"
        }


def runaway_config(provider: str, redis_url: str) -> Settings:
    """Summaries of at most 256 tokens, stored in Redis, one every three interactions."""
    return config(
        COMPACTING,
        provider=provider,
        store={"url": redis_url},
        summarizer={"timeout_seconds": 10, "max_summary_tokens": 256},
        policies={"default": EVERY_THREE_INTERACTIONS},
    )


def test_runaway_summary_is_cut_and_the_record_stays_small(
    mock: MockUpstream, start_proxy, redis_url: str
) -> None:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    runaway_summarizer(mock, b"word " * 100_000)  # 500 kB of summary for a 256-token budget
    server = start_proxy(runaway_config(mock.url, redis_url))
    answers = run_conversation(server, 6)
    assert all(answer.startswith("echo:") for _, answer in answers)  # every request served
    assert "applied" in [outcome for outcome, _ in answers]
    sizes = stored_values(redis_url)
    assert sizes, "a checkpoint was stored"
    # 256 summary tokens allow a summary of (2 * 256 + 1024) tokens, 8 bytes each at most.
    assert max(sizes.values()) < 64 * 1024
    sent = [r.json() for r in mock.chat_requests() if r.json()["model"] == "gpt-4o"]
    summary_message = sent[-1]["messages"][1]["content"]
    assert "<agent_summary>" in summary_message
    assert "[summary truncated]" in summary_message


def test_huge_summarizer_body_is_not_read_whole(
    mock: MockUpstream, start_proxy, redis_url: str
) -> None:
    import redis

    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    runaway_summarizer(mock, b"word " * 2_000_000)  # a 10 MB response body
    server = start_proxy(runaway_config(mock.url, redis_url))
    answers = run_conversation(server, 6)
    assert all(answer.startswith("echo:") for _, answer in answers)  # served without a summary
    assert "applied" not in [outcome for outcome, _ in answers]
    # The proxy stopped reading and closed the summarizer's connection mid-body.
    assert mock.disconnects
    assert all(size < 64 * 1024 for size in stored_values(redis_url).values())


def test_max_connections_is_kept_within_the_open_files_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """accept() failing for lack of descriptors is silent under uvloop: the budget must leave
    room for the provider and store pools (64 + 256 + 64 with the defaults)."""
    import resource

    from proxy.config.settings import parse_settings
    from proxy.server.run import connection_budget

    settings = parse_settings("", environ={})
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1000, 1000))
    assert connection_budget(settings) == 1000 - 64 - 256 - 64
    assert "server.max_connections lowered from 4096" in caplog.text
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1 << 20, 1 << 20))
    assert connection_budget(settings) == 4096


@pytest.mark.parametrize("http", PROTOCOLS)
def test_a_header_the_parser_refuses_is_a_json_400(
    mock: MockUpstream, start_proxy, http: str
) -> None:
    """A control character in a header value (here X-Compaction-Focus): both parsers refuse the
    request with their own plain-text 400; the client gets the proxy's JSON error shape."""
    server = served(mock, start_proxy, http=http)
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    with connect(server) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-compaction-focus: the \x01 tests\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        response = read_response(sock)
    assert status_of(response) == 400, response[:300]
    head, _, payload = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(payload)["error"]["type"] == "invalid_request_error"
    assert mock.received == []
