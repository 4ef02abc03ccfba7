"""What the proxy received from an agent, recorded in front of the proxy's ASGI app.

``Recording`` wraps the app: each HTTP request is numbered (``x-e2e-seq``, which the proxy
forwards, so the provider's log can be joined to it), and its method, path, the headers that
matter for replay, its body, the proxy's status and its ``x-compaction*`` answer headers are
kept. Credentials never are: only the headers in ``KEPT`` are, and a body's ``metadata`` (a
user id) is dropped.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.agents_e2e.provider import SEQUENCE

# Headers that say what the agent is and what it asks for; anything that may hold a
# credential (authorization, x-api-key, cookies, chatgpt-account-id) is left out.
KEPT = (
    "anthropic-version",
    "anthropic-beta",
    "content-type",
    "content-encoding",
    "user-agent",
    "x-app",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "thread-id",
    "x-session-id",
    "originator",
    "openai-beta",
    "x-conversation-id",
)
COMPACTED = ("/v1/messages", "/v1/chat/completions", "/v1/responses")


@dataclass
class Record:
    seq: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    answer: dict[str, str] = field(default_factory=dict)  # the proxy's x-compaction* headers

    @property
    def compacted_route(self) -> bool:
        return self.method == "POST" and self.path in COMPACTED


class Recording:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.records: list[Record] = []
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        with self._lock:
            seq = next(self._numbers)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record = Record(
            seq=seq,
            method=scope["method"],
            path=scope["path"],
            headers={k: v for k, v in headers.items() if k in KEPT},
            body=_body(raw, headers),
        )
        self.records.append(record)
        scope = {**scope, "headers": [*scope["headers"], (SEQUENCE.encode(), str(seq).encode())]}
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        async def watch(message: dict) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                record.answer = {
                    k.decode().lower(): v.decode()
                    for k, v in message.get("headers", [])
                    if k.decode().lower().startswith("x-compaction")
                }
            await send(message)

        await self.app(scope, replay, watch)


def _body(raw: bytes, headers: dict[str, str]) -> Any:
    if not raw:
        return None
    if headers.get("content-encoding"):
        return {"undecoded_bytes": len(raw)}
    try:
        body = json.loads(raw)
    except ValueError:
        return {"unparsed_bytes": len(raw)}
    if isinstance(body, dict):
        body.pop("metadata", None)
    return body
