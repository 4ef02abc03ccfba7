"""Faults at the proxy's own hop, part of ``make test``: what a client's connection can
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
from typing import Any

import httpx
import openai
import pytest

from tests.faults.attacks import expect_without_body
from tests.faults.raw_provider import RawProvider
from tests.faults.replicas import Replica, proxy_config
from tests.support.mock_upstream import sse_chunks, sse_reply
from tests.support.provider import SYSTEM, TOOLS, Provider, take_turn
from tests.support.sdk_clients import closed_after_test
from tests.support.settle import wait_until

MB2 = 2_000_000
TRANSPORTS = ["aiohttp", "httpx"]


def hop_config(provider: str, *, transport: str, **upstream: Any) -> str:
    return proxy_config(
        provider=provider, store_url="memory://", upstream={"transport": transport, **upstream}
    )


@pytest.fixture
def raw_provider() -> Iterator[RawProvider]:
    with RawProvider() as provider:
        yield provider


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


def access_log(
    replica: Replica, *, count: int = 1, paths: tuple[str, ...] = ("/v1/chat/completions",)
) -> list[dict]:
    """The proxy's access-log records of ``paths``, once there are ``count`` of them (or 5 s)."""

    def records() -> list[dict]:
        lines = replica.logs().splitlines()
        found = [
            json.loads(line.split(" proxy.access ", 1)[1])
            for line in lines
            if " proxy.access " in line
        ]
        return [r for r in found if r["path"] in paths]

    wait_until(lambda: len(records()) >= count, timeout=5)
    return records()


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
    proxy = start_serve(hop_config(raw_provider.url, transport=transport, max_connections=4))
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


# --- a client gone before or during its answer: nothing sent for it, the log as it went -------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_that_leaves_while_the_provider_thinks_holds_no_upstream_connection(
    transport: str, raw_provider: RawProvider, start_serve: Callable[[str], Replica]
) -> None:
    """A client times out while the provider thinks: the upstream connection is closed at once
    (not held until the provider answers), and the log says 499 after the time it waited
    upstream (it said ``upstream_ms: null`` though the provider had the request)."""
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
    logged = access_log(proxy, count=2, paths=("/v1/files", "/v1/chat/completions"))
    print(f"{transport}: {logged}")
    for record in logged:  # the provider had the request: the wait on it is logged
        assert record["status"] == 499 and record["upstream_ms"] >= 400, record


def sdk_client(replica: Replica, conversation: str, *, timeout: float = 10) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(
            base_url=f"{replica.url}/v1",
            api_key="sk-hop-tests",
            max_retries=0,
            timeout=timeout,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def test_a_client_gone_during_an_inline_summary_gets_nothing_sent(
    provider: Provider, start_replica: Callable[..., Replica]
) -> None:
    """The client times out while its request waits for an inline summary, then retries: the
    provider gets the retry only (the abandoned attempt was billed before), the summary the
    abandoned attempt started is stored and serves the retry, and the access log says the
    attempt never went upstream."""
    replica = start_replica("memory://")
    provider.summary_delay = 1.5
    client = sdk_client(replica, "gives-up")
    history: list[dict] = [SYSTEM]
    for turn in range(12):
        sent_before = len(provider.chat_requests())
        try:
            # Long enough turns that a summary replaces more than it costs, so it applies.
            text = f"turn {turn}: edit src/f{turn}.py " + "context " * 300
            take_turn(client.with_options(timeout=0.5), history, text)
        except openai.APITimeoutError:
            break  # this turn waits for the inline summary
    else:
        pytest.fail("no turn was summarized inline")
    # The summary ends 1.5 s after the client left; had the attempt gone on, it would be at the
    # provider right after.
    time.sleep(provider.summary_delay + 1.0)
    assert provider.summaries == 1
    assert len(provider.chat_requests()) == sent_before, "the abandoned attempt was sent"

    retried = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, tools=TOOLS
    )
    assert retried.headers["x-compaction"] == "applied"
    assert provider.summaries == 1  # the retry used the summary the abandoned attempt made
    assert len(provider.chat_requests()) == sent_before + 1
    abandoned = [r for r in access_log(replica, count=turn + 2) if r["status"] == 499]
    print(f"abandoned attempt logged as {abandoned}")
    assert len(abandoned) == 1
    assert abandoned[0]["upstream_ms"] is None and abandoned[0]["bytes_out"] == 0


@pytest.mark.parametrize("conversation", [True, False], ids=["compacted", "untouched"])
def test_the_access_log_tells_what_a_streaming_client_received(
    conversation: bool, provider: Provider, start_replica: Callable[..., Replica]
) -> None:
    """The SDK stops reading at ``[DONE]`` and closes the connection; a provider may hold its
    stream open a moment longer. Then a client reads two events of a slow stream and leaves.
    The log said 499 with ``bytes_out: 0`` for both; it must say what the client got."""
    replica = start_replica("memory://", upstream={"discover_windows": False})
    client = sdk_client(replica, "streams")
    if not conversation:
        client = client.with_options(default_headers={"X-Compaction": "off"})
    whole = sse_chunks(["hel", "lo"])
    slow = sse_chunks(["one ", "two ", "three ", "four"], pause=0.4)
    provider.mock.push(sse_reply([*whole, 1.0]), sse_reply(slow))
    messages = [SYSTEM, {"role": "user", "content": "hi"}]

    stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "hello"
    full = access_log(replica)[-1]

    stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
    events = iter(stream)
    next(events), next(events)
    stream.close()
    partial = access_log(replica, count=2)[-1]
    print(f"full stream: {full}\npartial stream: {partial}")

    relayed = sum(len(c) for c in whole if isinstance(c, bytes))
    assert full["status"] == 200 and full["bytes_out"] == relayed
    assert full["upstream_ms"] is not None
    assert partial["status"] == 200 and partial["client_left"] is True
    assert 0 < partial["bytes_out"] < sum(len(c) for c in slow if isinstance(c, bytes))


# --- the request head ----------------------------------------------------------------------


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
