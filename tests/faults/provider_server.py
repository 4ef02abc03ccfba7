"""The campaign's provider: a lean mock of OpenAI's and Anthropic's APIs in a process of its own.

``python -m tests.faults.provider_server PORT [--serves openai|anthropic] [--body-first] [--gzip]``.
Unlike tests/support/mock_upstream.py it keeps no request bodies (a soak sends hundreds of thousands),
so its memory stays flat. It answers chat completions, Responses (``/v1/responses``) and
Anthropic Messages (``/v1/messages``), streamed when asked, and the summarizer's calls (model
``mock-summarizer``) with numbered summaries that name the caller's tenant; any other path gets
an empty list. It counts what the campaign asserts on:

- ``summaries``: summarizer calls answered (each should become exactly one checkpoint);
- ``cross_tenant``: requests whose body holds another tenant's marker. Callers use the key
  ``sk-campaign-<tenant>`` and write ``TENANT-<tenant>`` in every message, and a summary names its
  tenant, so a summary or message of one tenant in another's prompt shows up here;
- ``foreign_keys``: requests carrying a key made for the other provider (``sk-ant-`` or an
  ``anthropic-version`` header at the OpenAI one, ``sk-campaign-`` at the Anthropic one);
- ``in_flight``: requests whose headers arrived and whose answer is not finished (a connection
  the proxy holds open without finishing its request stays counted);
- ``markers``: how many model requests (not the summarizer's) held each ``ONCE-<name>`` marker:
  what the provider was billed for.

``POST /control`` with a JSON object sets knobs while it runs: ``gzip`` (compress every answer,
error bodies and streams included, when the request accepts gzip, as real providers do; on from
the start with ``--gzip``),
``max_messages`` (a prompt of more messages or input items is refused with the dialect's
"too long" 400; 0: never) and ``summary_delay`` (seconds each summarizer call takes).

``--body-first`` plays a provider that ignores ``Expect: 100-continue`` and answers only once
the whole body arrived (uvicorn alone would send ``100 Continue`` on the first read).

Bad input never makes it answer 5xx: a 5xx the campaign sees is the proxy's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tests.support.anthropic_provider import message as anthropic_message
from tests.support.anthropic_provider import sse_events as anthropic_events
from tests.support.mock_upstream import accepts, completion, compressed, sse_chunks

SUMMARIZER_MODEL = "mock-summarizer"
MARKER = re.compile(rb"TENANT-([a-z0-9]+)")
ONCE = re.compile(rb"ONCE-([A-Za-z0-9-]+)")
KEY = re.compile(r"Bearer sk-campaign-([a-z0-9]+)")
FOREIGN = {"openai": (b"sk-ant-", b"anthropic-version"), "anthropic": (b"sk-campaign-",)}
EMPTY_LIST = {"object": "list", "data": [], "has_more": False, "first_id": None, "last_id": None}
Answer = tuple[int, str, list[bytes]]


class BodyFirst(HttpToolsProtocol):
    """uvicorn's HTTP protocol, minus its ``100 Continue``: the answer waits for the body."""

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self.expect_100_continue = False


def _json(body: Any, status: int = 200) -> Answer:
    return status, "application/json", [json.dumps(body).encode()]


def _overflow(path: str) -> Answer:
    if path.endswith("/messages"):
        error = {
            "type": "invalid_request_error",
            "message": "prompt is too long: 250000 tokens > 200000 maximum",
        }
        return _json({"type": "error", "error": error}, 400)
    error = {
        "message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error",
        "param": "input" if path.endswith("/responses") else "messages",
        "code": "context_length_exceeded",
    }
    return _json({"error": error}, 400)


def _response_object(model: str, text: str) -> dict[str, Any]:
    """A completed Responses object with one output message (the fields the SDK reads)."""
    return {
        "id": "resp_campaign",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "message",
                "id": "msg_campaign",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def _response_events(response: dict[str, Any]) -> list[bytes]:
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    text = response["output"][0]["content"][0]["text"]
    events = [
        ("response.created", {"response": opening}),
        (
            "response.output_text.delta",
            {"item_id": "msg_campaign", "output_index": 0, "delta": text},
        ),
        ("response.completed", {"response": response}),
    ]
    return [
        f"event: {name}\ndata: {json.dumps({'type': name, 'sequence_number': i, **data})}\n\n".encode()
        for i, (name, data) in enumerate(events)
    ]


class Provider:
    def __init__(self, serves: str = "openai", *, gzip: bool = False) -> None:
        self.foreign = FOREIGN[serves]
        self.knobs: dict[str, Any] = {"gzip": gzip, "max_messages": 0, "summary_delay": 0.0}
        self.stats: dict[str, Any] = {
            "serves": serves,
            "requests": 0,
            "chats": 0,
            "summaries": 0,
            "cross_tenant": 0,
            "cross_tenant_examples": [],
            "invalid_json": 0,  # bodies Python reads but JSON does not allow (NaN, Infinity)
            "foreign_keys": 0,
            "foreign_key_paths": [],
            "in_flight": 0,
            "overflows": 0,
            "gzipped": 0,
            "markers": {},
        }

    def _not_json(self, constant: str) -> float:
        self.stats["invalid_json"] += 1
        return float(constant)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        self.stats["in_flight"] += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.stats["in_flight"] -= 1

    async def _serve(self, scope: dict, receive: Any, send: Any) -> None:
        parts: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        headers = dict(scope["headers"])
        status, content_type, chunks = await self._answer(scope, headers, body)
        extra = []
        asked = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.knobs["gzip"] and accepts(asked, "gzip"):
            extra.append((b"content-encoding", b"gzip"))
            chunks = [c for c in compressed(list(chunks), "gzip") if isinstance(c, bytes)]
            self.stats["gzipped"] += 1
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type.encode()), *extra],
            }
        )
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _count(self, path: str, headers: dict[bytes, bytes], body: bytes) -> None:
        self.stats["requests"] += 1
        seen = b" ".join(k + b": " + v for k, v in headers.items())
        if any(sign in seen for sign in self.foreign):
            self.stats["foreign_keys"] += 1
            if len(self.stats["foreign_key_paths"]) < 10:
                self.stats["foreign_key_paths"].append(path)

    async def _answer(self, scope: dict, headers: dict[bytes, bytes], body: bytes) -> Answer:
        path = scope["path"]
        if path == "/stats":
            return _json(self.stats)
        if path == "/control":
            self.knobs.update(json.loads(body or b"{}"))
            return _json(self.knobs)
        self._count(path, headers, body)
        if path.endswith("/messages/count_tokens"):
            return _json({"input_tokens": 10})
        if scope["method"] != "POST" or not path.endswith(
            ("/chat/completions", "/responses", "/messages")
        ):
            return _json(EMPTY_LIST)
        try:
            request = json.loads(body, parse_constant=self._not_json)
            model = request.get("model", "m")
            prompt = request["input"] if path.endswith("/responses") else request["messages"]
            count = len(prompt) if isinstance(prompt, list) else 1
        except Exception:  # whatever the proxy let through: a client error, never a 5xx
            error = {"error": {"message": "mock: bad request", "type": "invalid_request_error"}}
            return _json(error, 400)
        key = KEY.fullmatch(headers.get(b"authorization", b"").decode(errors="replace"))
        tenant = key.group(1) if key else None
        others = {m.decode() for m in MARKER.findall(body)} - {tenant}
        if tenant is not None and others:
            self.stats["cross_tenant"] += 1
            if len(self.stats["cross_tenant_examples"]) < 5:
                self.stats["cross_tenant_examples"].append(f"{tenant} saw {sorted(others)}")
        if model == SUMMARIZER_MODEL:
            self.stats["summaries"] += 1
            text = f"SUMMARY-{self.stats['summaries']} for TENANT-{tenant}: files were edited."
            await asyncio.sleep(float(self.knobs["summary_delay"]))
            return _json(completion(text, model=model))
        for name in {m.decode() for m in ONCE.findall(body)}:  # billed: not the summarizer's
            self.stats["markers"][name] = self.stats["markers"].get(name, 0) + 1
        if 0 < int(self.knobs["max_messages"]) < count:
            self.stats["overflows"] += 1
            return _overflow(path)
        self.stats["chats"] += 1
        text = f"done: saw {count} messages"
        stream = bool(request.get("stream"))
        if path.endswith("/responses"):
            response = _response_object(model, text)
            return (
                (200, "text/event-stream", _response_events(response))
                if stream
                else _json(response)
            )
        if path.endswith("/messages"):
            if stream:
                return (
                    200,
                    "text/event-stream",
                    [bytes(e) for e in anthropic_events(text, model=model)],
                )
            return _json(anthropic_message([{"type": "text", "text": text}], model=model))
        if stream:
            return 200, "text/event-stream", [bytes(c) for c in sse_chunks([text], model=model)]
        return _json(completion(text, model=model))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--serves", choices=sorted(FOREIGN), default="openai")
    parser.add_argument("--body-first", action="store_true")
    parser.add_argument("--gzip", action="store_true", help="the gzip knob on from the start")
    args = parser.parse_args()
    uvicorn.run(
        Provider(args.serves, gzip=args.gzip),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        http=BodyFirst if args.body_first else "auto",
    )


if __name__ == "__main__":
    main()
