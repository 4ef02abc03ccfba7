"""The campaign's provider: a lean OpenAI-compatible mock in a process of its own, checking tenants.

``python -m tests.faults.provider_server PORT [--gzip]``. Unlike tests/mock_upstream.py it keeps no request
bodies (a soak sends hundreds of thousands), so its memory stays flat. It answers chat completions
(streamed when asked) and the summarizer's calls (model ``mock-summarizer``) with numbered
summaries that name the caller's tenant, and it counts what the campaign asserts on:

- ``summaries``: summarizer calls answered (each should become exactly one checkpoint);
- ``cross_tenant``: requests whose body holds another tenant's marker. Callers use the key
  ``sk-campaign-<tenant>`` and write ``TENANT-<tenant>`` in every message, and a summary names its
  tenant, so a summary or message of one tenant in another's prompt shows up here.

Bad input never makes it answer 5xx: a 5xx the campaign sees is the proxy's own. With ``--gzip``
it compresses every answer whose request accepts gzip, as real providers do (issue 17).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from tests.mock_upstream import accepts, completion, compressed, sse_chunks

SUMMARIZER_MODEL = "mock-summarizer"
MARKER = re.compile(rb"TENANT-([a-z0-9]+)")
KEY = re.compile(r"Bearer sk-campaign-([a-z0-9]+)")


class Provider:
    def __init__(self, *, gzip: bool = False) -> None:
        self.gzip = gzip
        self.stats: dict[str, Any] = {
            "requests": 0,
            "chats": 0,
            "summaries": 0,
            "cross_tenant": 0,
            "cross_tenant_examples": [],
            "invalid_json": 0,  # bodies Python reads but JSON does not allow (NaN, Infinity)
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
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, content_type, chunks = self._answer(scope, body)
        headers = [(b"content-type", content_type.encode())]
        asked = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.gzip and accepts(asked, "gzip"):
            headers.append((b"content-encoding", b"gzip"))
            chunks = [c for c in compressed(list(chunks), "gzip") if isinstance(c, bytes)]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _answer(self, scope: dict, body: bytes) -> tuple[int, str, list[bytes]]:
        self.stats["requests"] += 1
        if scope["path"] == "/stats":
            return 200, "application/json", [json.dumps(self.stats).encode()]
        if not scope["path"].endswith("/chat/completions"):
            return 200, "application/json", [b'{"object": "list", "data": []}']
        try:
            request = json.loads(body, parse_constant=self._not_json)
            model = request.get("model", "m")
            count = len(request["messages"])
        except Exception:  # whatever the proxy let through: a client error, never a 5xx
            error = {"error": {"message": "mock: bad request", "type": "invalid_request_error"}}
            return 400, "application/json", [json.dumps(error).encode()]
        headers = dict(scope["headers"])
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
        else:
            self.stats["chats"] += 1
            text = f"done: saw {count} messages"
        if request.get("stream"):
            return 200, "text/event-stream", sse_chunks([text], model=model)
        return 200, "application/json", [json.dumps(completion(text, model=model)).encode()]


def main() -> None:
    import uvicorn

    port = int(sys.argv[1])
    provider = Provider(gzip="--gzip" in sys.argv[2:])
    uvicorn.run(provider, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
