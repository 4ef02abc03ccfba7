"""The proxy on the wire, driven by the official openai client: what the provider received and
what the client got, byte for byte."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import httpx
import openai
import pytest

from tests.support.cache_key import DERIVED
from tests.support.clients import openai_client
from tests.support.config import config
from tests.support.mock_upstream import (
    MockUpstream,
    Reply,
    completion,
    json_reply,
    sse_chunks,
    sse_reply,
)
from tests.support.servers import ThreadedUvicorn, free_port

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
]


def own_key_client(proxy: ThreadedUvicorn, conversation: str | None = None) -> openai.OpenAI:
    """The official client with a key of its own, naming no conversation unless asked."""
    return openai_client(proxy, conversation, key="sk-client-key")


def test_chat_completion_reaches_provider_unchanged(proxy, mock: MockUpstream) -> None:
    client = own_key_client(proxy, "conv-1")
    result = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)

    assert result.choices[0].message.content == "echo: 2 messages"
    (received,) = mock.received
    assert received.method == "POST"
    assert received.path == "/v1/chat/completions"
    # The conversation's cache key (a conversation is named), and the client's body unchanged.
    assert received.json() == {"model": "gpt-4o", "messages": MESSAGES} | {
        "prompt_cache_key": received.json()["prompt_cache_key"]
    }
    assert DERIVED.fullmatch(received.json()["prompt_cache_key"])
    assert received.headers["authorization"] == "Bearer sk-client-key"
    assert "x-conversation-id" not in received.headers
    assert received.headers["host"] == mock.url.removeprefix("http://")


def test_body_is_forwarded_byte_identical(proxy, mock: MockUpstream) -> None:
    raw = b'{ "model" : "gpt-4o",\n  "messages": [{"role":"user","content":"caf\\u00e9"}] , "x": 1.50}'
    response = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "authorization": "Bearer k"},
    )
    assert response.status_code == 200
    assert mock.received[0].body == raw
    assert mock.received[0].headers["content-length"] == str(len(raw))


def test_provider_headers_and_status_come_back(proxy, mock: MockUpstream) -> None:
    mock.push(
        json_reply(completion("hi"), headers=[("x-request-id", "req-123"), ("openai-model", "m")])
    )
    raw = own_key_client(proxy).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MESSAGES
    )
    assert raw.status_code == 200
    # The provider's own Date and Server, once: the proxy adds no second pair.
    assert len(raw.headers.get_list("date")) == 1
    assert raw.headers.get_list("server") == ["uvicorn"]
    assert raw.headers["x-request-id"] == "req-123"
    assert raw.headers["openai-model"] == "m"
    assert raw.parse().choices[0].message.content == "hi"


def test_provider_error_body_and_status_pass_through(proxy, mock: MockUpstream) -> None:
    error = {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    mock.push(json_reply(error, status=429, headers=[("retry-after", "7")]))
    with pytest.raises(openai.RateLimitError) as info:
        own_key_client(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 429
    assert info.value.body == error["error"]
    assert info.value.response.headers["retry-after"] == "7"


def test_streaming_delivers_every_chunk(proxy, mock: MockUpstream) -> None:
    pieces = ["Once", " upon", " a", " time"]
    mock.push(sse_reply(sse_chunks(pieces)))
    stream = own_key_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == "Once upon a time"
    assert mock.received[0].json()["stream"] is True


def test_streamed_bytes_are_identical(proxy, mock: MockUpstream) -> None:
    chunks = sse_chunks(["a", "b", "c"])
    mock.push(sse_reply(chunks))
    with httpx.stream(
        "POST", f"{proxy.url}/v1/chat/completions", json={"messages": [], "stream": True}
    ) as response:
        got = b"".join(response.iter_raw())
    assert got == b"".join(c for c in chunks if isinstance(c, bytes))
    assert response.headers["content-type"] == "text/event-stream"


def test_chunks_arrive_incrementally(proxy, mock: MockUpstream) -> None:
    """The client sees chunk 1 before the provider has even sent chunk 2."""
    mock.push(sse_reply(sse_chunks(["first", "second"], pause=0.6)))
    stream = own_key_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    )
    seen: list[tuple[str, float]] = []
    for chunk in stream:
        if chunk.choices[0].delta.content:
            seen.append((chunk.choices[0].delta.content, time.monotonic()))
    assert [text for text, _ in seen] == ["first", "second"]
    second_sent = mock.chunk_times[2]  # role chunk, "first", then "second"
    assert seen[0][1] < second_sent
    assert seen[1][1] - seen[0][1] > 0.4


@pytest.mark.anyio
async def test_async_client_streams(proxy, mock: MockUpstream) -> None:
    mock.push(sse_reply(sse_chunks(["x", "y"])))
    async with openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        plain = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert text == "xy"
    assert plain.choices[0].message.content == "echo: 2 messages"


def test_tool_calls_round_trip(proxy, mock: MockUpstream) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    }
    mock.push(json_reply(completion("", tool_calls=[call])))
    tools = [
        {
            "type": "function",
            "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    client = own_key_client(proxy)
    first = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=tools)
    assert first.choices[0].message.tool_calls[0].function.name == "read_file"
    history = [
        *MESSAGES,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    sent = mock.received[1].json()
    assert sent["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "print('hi')",
    }
    assert sent["tools"] == tools


def test_other_routes_pass_through(proxy, mock: MockUpstream) -> None:
    client = own_key_client(proxy)
    models = client.models.list()
    assert [m.id for m in models.data] == ["mock-model"]

    vector = {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}
    usage = {"prompt_tokens": 1, "total_tokens": 1}
    mock.push(json_reply({"object": "list", "data": [vector], "model": "e", "usage": usage}))
    result = client.embeddings.create(
        model="text-embedding-3-small", input="hello", encoding_format="float"
    )
    assert result.data[0].embedding == [0.5, -0.25]
    assert mock.received[-1].path == "/v1/embeddings"
    assert mock.received[-1].json() == {
        "model": "text-embedding-3-small",
        "input": "hello",
        "encoding_format": "float",
    }

    response = httpx.get(f"{proxy.url}/v1/files?purpose=batch&limit=2")
    assert response.json()["path"] == "/v1/files"
    assert mock.received[-1].query == "purpose=batch&limit=2"

    response = httpx.delete(f"{proxy.url}/v1/files/file-abc")
    assert mock.received[-1].method == "DELETE"
    assert mock.received[-1].path == "/v1/files/file-abc"


def test_get_on_chat_completions_is_passed_through(proxy, mock: MockUpstream) -> None:
    """GET /v1/chat/completions lists stored completions at OpenAI: not ours to compact."""
    response = httpx.get(f"{proxy.url}/v1/chat/completions?limit=1")
    assert response.status_code == 200
    assert mock.received[-1].method == "GET"


def test_large_upload_is_streamed_through(proxy, mock: MockUpstream) -> None:
    payload = bytes(range(256)) * 40_000  # ~10 MB

    def body():
        for i in range(0, len(payload), 1 << 20):
            yield payload[i : i + (1 << 20)]

    response = httpx.post(f"{proxy.url}/v1/files", content=body())
    assert response.json()["bytes"] == len(payload)
    assert mock.received[-1].body == payload


def test_compressed_response_is_decoded_once(proxy, mock: MockUpstream) -> None:
    body = json.dumps(completion("squeezed")).encode()
    gzipped = Reply(
        headers=[("content-type", "application/json"), ("content-encoding", "gzip")],
        chunks=[gzip.compress(body)],
    )
    mock.push(gzipped, gzipped)
    client = own_key_client(proxy)
    result = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert result.choices[0].message.content == "squeezed"
    raw = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"messages": []},
        headers={"accept-encoding": "gzip"},
    )
    assert raw.headers["content-encoding"] == "gzip"
    assert raw.json()["choices"][0]["message"]["content"] == "squeezed"


def test_client_accept_encoding_is_what_provider_sees(proxy, mock: MockUpstream) -> None:
    httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"messages": []},
        headers={"accept-encoding": "identity"},
    )
    assert mock.received[-1].headers["accept-encoding"] == "identity"
    assert "user-agent" in mock.received[-1].headers
    assert mock.received[-1].headers["user-agent"].startswith("python-httpx")


def test_hop_by_hop_and_own_headers_are_dropped(proxy, mock: MockUpstream) -> None:
    mock.push(
        json_reply(
            completion("x"),
            headers=[("x-keep", "1"), ("connection", "close, x-drop"), ("x-drop", "2")],
        )
    )
    response = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"messages": []},
        headers={
            "connection": "keep-alive, x-secret-hop",
            "x-secret-hop": "1",
            "proxy-authorization": "Basic abc",
            "te": "trailers",
            "x-conversation-id": "c",
            "x-compaction": "off",
            "x-compaction-policy": "p",
            "x-custom": "kept",
        },
    )
    sent = mock.received[-1].headers
    for name in (
        "x-secret-hop",
        "proxy-authorization",
        "te",
        "x-conversation-id",
        "x-compaction",
        "x-compaction-policy",
    ):
        assert name not in sent, name
    assert sent["x-custom"] == "kept"
    assert response.headers["x-keep"] == "1"
    assert "x-drop" not in response.headers


def test_configured_key_replaces_client_authorization(mock: MockUpstream, start_proxy) -> None:
    server = start_proxy(config(provider=mock.url, upstream={"api_key": "sk-proxy-owned"}))
    own_key_client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert mock.received[-1].headers["authorization"] == "Bearer sk-proxy-owned"


def test_client_cannot_choose_the_upstream_host(proxy, mock: MockUpstream) -> None:
    httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"messages": [], "api_base": "http://evil.example", "base_url": "http://evil.example"},
        headers={"host": "evil.example", "x-forwarded-host": "evil.example"},
    )
    assert len(mock.received) == 1
    assert mock.received[0].headers["host"] == mock.url.removeprefix("http://")
    # An absolute-form request target names another host: only its path is used.
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(
            b"GET http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200")
    assert mock.received[-1].path == "/v1/models"


def test_dot_segments_are_refused(proxy, mock: MockUpstream) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(b"GET /v1/../../admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400")
    assert mock.received == []


def test_redirects_are_not_followed(proxy, mock: MockUpstream) -> None:
    mock.push(Reply(status=307, headers=[("location", "http://evil.example/v1/models")]))
    response = httpx.get(f"{proxy.url}/v1/models")
    assert response.status_code == 307
    assert response.headers["location"] == "http://evil.example/v1/models"
    assert len(mock.received) == 1


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "gpt-4o"}', 400, "'messages' is required"),
        (b'{"messages": "hi"}', 400, "'messages' must be an array"),
        (b'{"messages": [], "model": 4}', 400, "'model' must be a string"),
    ],
)
def test_bad_chat_requests_are_refused_and_not_forwarded(
    proxy, mock, body, status, fragment
) -> None:
    response = httpx.post(
        f"{proxy.url}/v1/chat/completions", content=body, headers={"X-Conversation-Id": "c1"}
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert fragment in error["message"]
    assert mock.received == []


@pytest.mark.parametrize("headers", [{}, {"X-Compaction": "off", "X-Conversation-Id": "c1"}])
def test_requests_left_alone_are_not_parsed_the_provider_judges_them(
    proxy, mock: MockUpstream, headers: dict[str, str]
) -> None:
    """Without compaction the proxy decides from the headers alone and forwards the
    bytes as they came, whatever they are (the provider's answer is the client's)."""
    mock.push(Reply(status=400, headers=[("content-type", "application/json")], chunks=[b"{}"]))
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], oops'
    response = httpx.post(f"{proxy.url}/v1/chat/completions", content=body, headers=headers)
    assert response.status_code == 400
    assert response.headers["x-compaction"] == "off"
    assert [r.body for r in mock.received] == [body]
    assert mock.received[0].headers["content-length"] == str(len(body))

    def chunked():  # no Content-Length: read whole (within server.max_body_bytes), then sent
        yield body[:10]
        yield body[10:]

    mock.push(Reply(status=400, headers=[("content-type", "application/json")], chunks=[b"{}"]))
    response = httpx.post(f"{proxy.url}/v1/chat/completions", content=chunked(), headers=headers)
    assert response.status_code == 400 and response.headers["x-compaction"] == "off"
    assert mock.received[1].body == body


def test_oversized_body_is_413(mock: MockUpstream, start_proxy) -> None:
    server = start_proxy(config(provider=mock.url, server={"max_body_bytes": 1000}))
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}]}).encode()
    response = httpx.post(f"{server.url}/v1/chat/completions", content=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"

    def chunked():  # no Content-Length: the limit must hold while reading
        yield big[:500]
        yield big[500:]

    response = httpx.post(f"{server.url}/v1/chat/completions", content=chunked())
    assert response.status_code == 413
    assert mock.received == []


def test_openai_client_sees_provider_unreachable_as_502(start_proxy) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    server = start_proxy(config(provider=dead))
    with pytest.raises(openai.APIStatusError) as info:
        own_key_client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_unavailable"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_provider_timeout_is_504(mock: MockUpstream, start_proxy, transport: str) -> None:
    upstream = {"transport": transport, "timeouts": {"read": 0.3}}
    server = start_proxy(config(provider=mock.url, upstream=upstream))
    mock.push(Reply(delay=1.0, chunks=[b"{}"]))
    response = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": []})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("conversation", [None, "leaves"], ids=["unread", "read"])
def test_client_disconnect_mid_stream_cancels_upstream(
    proxy, mock: MockUpstream, conversation: str | None
) -> None:
    # With a conversation compaction reads the body first (and watches the client meanwhile).
    mock.push(sse_reply(sse_chunks(["a", "b", "c", "d"], pause=0.5)))
    named = {"x-conversation-id": conversation} if conversation else {}
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    with httpx.stream(
        "POST", f"{proxy.url}/v1/chat/completions", json=body, headers=named
    ) as response:
        iterator = response.iter_raw()
        next(iterator)
        closed_at = time.monotonic()
    deadline = time.monotonic() + 2
    while not mock.disconnects and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mock.disconnects, "the provider never saw the connection close"
    assert mock.disconnects[0] - closed_at < 1.0
    # The proxy keeps serving afterwards.
    assert httpx.get(f"{proxy.url}/v1/models").status_code == 200


def test_health_and_readiness(proxy) -> None:
    assert httpx.get(f"{proxy.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{proxy.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    missing = httpx.get(f"{proxy.url}/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


def test_many_concurrent_streams(proxy, mock: MockUpstream) -> None:
    mock.default = lambda request: sse_reply(sse_chunks(["p", "q"], pause=0.05))
    results: list[str] = []

    def run() -> None:
        stream = own_key_client(proxy).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        )
        results.append("".join(c.choices[0].delta.content or "" for c in stream))

    threads = [threading.Thread(target=run) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert results == ["pq"] * 20
