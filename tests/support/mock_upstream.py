"""A mock OpenAI-compatible provider, served for real (see servers.ThreadedUvicorn).

It records every request it receives and answers from a script of replies (or a default chat
completion that echoes how many messages it got), streaming when asked, with optional pauses
between chunks, so tests can assert on what the provider received and when. With ``compression``
set (``gzip`` or ``deflate``) it compresses every answer the way real providers do when the
request's Accept-Encoding allows it (``compress_unasked``: even when it does not), flushing after
each chunk so that a stream still streams.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    query: str
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode().lower(): v.decode() for k, v in self.raw_headers}

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What to answer. ``chunks`` are sent one by one; a float in place of a chunk is a pause."""

    status: int = 200
    delay: float = 0.0  # seconds before the status line is sent
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes | float] = field(default_factory=list)


Script = Reply | Callable[[Received], Reply]


def completion(content: str, *, model: str = "mock-model", tool_calls: list | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chunk_event(delta: dict, finish: str | None = None, *, model: str = "mock-model") -> bytes:
    """One SSE event of a streamed chat completion."""
    data = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def sse_chunks(pieces: list[str], *, model: str = "mock-model", pause: float = 0.0) -> list:
    """A streamed chat completion: one SSE event per piece, then [DONE]."""

    def event(delta: dict, finish: str | None = None) -> bytes:
        return chunk_event(delta, finish, model=model)

    out: list[bytes | float] = [event({"role": "assistant", "content": ""})]
    for piece in pieces:
        if pause:
            out.append(pause)
        out.append(event({"content": piece}))
    out.append(event({}, "stop"))
    out.append(b"data: [DONE]\n\n")
    return out


def json_reply(body: Any, status: int = 200, headers: list | None = None) -> Reply:
    data = json.dumps(body).encode()
    return Reply(
        status=status,
        headers=[("content-type", "application/json"), *(headers or [])],
        chunks=[data],
    )


def sse_reply(chunks: list, headers: list | None = None) -> Reply:
    return Reply(
        headers=[("content-type", "text/event-stream"), *(headers or [])],
        chunks=chunks,
    )


def default_reply(request: Received) -> Reply:
    """Echo how many messages arrived; stream when the request asks to."""
    if request.path.endswith("/chat/completions") and request.method == "POST":
        body = request.json()
        text = f"echo: {len(body.get('messages', []))} messages"
        if body.get("stream"):
            return sse_reply(sse_chunks([text[:5], text[5:]], model=body.get("model", "m")))
        return json_reply(completion(text, model=body.get("model", "mock-model")))
    if request.path.endswith("/models"):
        return json_reply({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
    return json_reply({"path": request.path, "method": request.method, "bytes": len(request.body)})


def accepts(headers: dict[str, str], coding: str) -> bool:
    """The request's Accept-Encoding names ``coding`` (lower-cased header names)."""
    accepted = headers.get("accept-encoding", "")
    return coding in [item.split(";")[0].strip().lower() for item in accepted.split(",")]


def compressed(chunks: list[bytes | float], coding: str) -> list[bytes | float]:
    """``chunks`` in ``coding`` (gzip or deflate), each flushed so that a stream still streams;
    pauses stay pauses."""
    compressor = zlib.compressobj(wbits=31 if coding == "gzip" else 15)
    out: list[bytes | float] = [
        piece
        if isinstance(piece, float | int)
        else compressor.compress(piece) + compressor.flush(zlib.Z_SYNC_FLUSH)
        for piece in chunks
    ]
    out.append(compressor.flush())
    return out


class ChatScript:
    """Answers a MockUpstream's chat completions (``chat``, from the request's body), taking over
    its default; any other path gets the default echo. Subclasses script the model."""

    def __init__(self, mock: MockUpstream) -> None:
        self.mock = mock
        self._lock = threading.Lock()  # replies are made on the server's thread
        mock.default = self

    def __call__(self, request: Received) -> Reply:
        if not request.path.endswith("/chat/completions"):
            return default_reply(request)
        return self.chat(request.json())

    def chat(self, body: dict[str, Any]) -> Reply:
        raise NotImplementedError


class MockUpstream:
    """The ASGI app of the mock provider. Thread-safe: tests read it while it serves."""

    def __init__(self) -> None:
        self.url = ""  # where it is served (tests.support.proxies.running_mock sets it)
        self.received: list[Received] = []
        self.disconnects: list[float] = []  # monotonic times at which a client went away
        self.chunk_times: list[float] = []  # monotonic time each body chunk was sent
        self._script: deque[Script] = deque()
        self._lock = threading.Lock()
        self.default: Callable[[Received], Reply] = default_reply
        self.compression: str | None = None  # gzip | deflate
        self.compress_unasked = False

    def push(self, *replies: Script) -> None:
        with self._lock:
            self._script.extend(replies)

    def chat_requests(self) -> list[Received]:
        return [r for r in self.received if r.path.endswith("/chat/completions")]

    def _next(self, request: Received) -> Reply:
        with self._lock:
            self.received.append(request)
            script = self._script.popleft() if self._script else self.default
        return script(request) if callable(script) else script

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects.append(time.monotonic())
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = Received(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode(),
            raw_headers=list(scope["headers"]),
            body=body,
        )
        reply = self._compressed(self._next(request), request)
        watcher = asyncio.create_task(self._watch(receive))
        try:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            await send(
                {
                    "type": "http.response.start",
                    "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers],
                }
            )
            for chunk in reply.chunks:
                if isinstance(chunk, float | int):
                    await asyncio.sleep(chunk)
                    if watcher.done():
                        return
                    continue
                self.chunk_times.append(time.monotonic())
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()

    def _compressed(self, reply: Reply, request: Received) -> Reply:
        coding = self.compression
        if coding is None or not (accepts(request.headers, coding) or self.compress_unasked):
            return reply
        headers = [(k, v) for k, v in reply.headers if k.lower() != "content-length"]
        headers.append(("content-encoding", coding))
        chunks = compressed(reply.chunks, coding)
        return Reply(status=reply.status, delay=reply.delay, headers=headers, chunks=chunks)

    async def _watch(self, receive: Any) -> None:
        message = await receive()
        if message["type"] == "http.disconnect":
            self.disconnects.append(time.monotonic())
