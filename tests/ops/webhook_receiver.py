"""A webhook receiver for the export tests: a small starlette app served by a real uvicorn.

It records every POST (headers and raw body). It can fail the first ``fail_first`` POSTs with
``status``, or hold every POST until ``release`` is set (a stuck receiver).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Receiver:
    fail_first: int = 0
    status: int = 503
    release: threading.Event | None = None  # when set: hold each POST until it is set
    posts: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            body = await request.body()
            with self._lock:
                self.posts.append((dict(request.headers), body))
                n = len(self.posts)
            if self.release is not None:
                await asyncio.to_thread(self.release.wait)
            return Response(status_code=self.status if n <= self.fail_first else 204)

        return Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def snapshot(self) -> list[tuple[dict[str, str], bytes]]:
        with self._lock:
            return list(self.posts)


def signed_by(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does with X-Compaction-Signature (docs/operations.md): HMAC-SHA256 of the
    raw body under the shared secret, compared in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)
