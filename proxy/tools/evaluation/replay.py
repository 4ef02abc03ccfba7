"""Replaying a transcript through the proxy's real app, to see what a policy would send.

The app is built in-process from the user's settings (``create_app``), with three changes: a
``memory://`` store of its own (a replay never touches the user's Redis), optionally a context
window for the model under test (``--context-window``), and an upstream client of our own that
records each rewritten body and answers with a canned completion, so replayed turns cost
nothing. The summarizer is the configured one and really called: that is what is evaluated.

The transcript is sent turn by turn, as its client sent it: one request per assistant message,
carrying the history before it, under one conversation id per transcript and policy. After each
request the replay waits until the app's ahead-of-time summaries are done (the proxy's best
case: a client that pauses between requests). The last request is the whole transcript plus a
placeholder user message where the probe question goes; what the proxy sent for it, minus the
placeholder, is the compacted history.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from proxy.compaction import protocol
from proxy.compaction.summaries.prefix_summary import INSTRUCTION as PREFIX_INSTRUCTION
from proxy.errors import EvaluationError
from proxy.tools.evaluation.proxy_parts import (
    POLICY_HEADER,
    Body,
    BufferedResponse,
    ModelInfo,
    RawHeaders,
    Settings,
    TokenCounter,
    create_app,
    lookup_model,
)
from proxy.tools.evaluation.transcripts import Transcript

PLACEHOLDER = "[the evaluation question goes here]"
_CANNED = json.dumps(
    {
        "id": "chatcmpl-eval-replay",
        "object": "chat.completion",
        "created": 0,
        "model": "eval-replay",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "(replayed)"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
).encode()
_NOT_SERVED = b'{"error": {"message": "not served in a replay"}}'
_SETTLE_POLL_SECONDS = 0.02
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:-]")
_DEPTH = re.compile(r"^proxy_background_queue_depth (\S+)$", re.M)


def _asks_for_summary(messages: list[dict[str, Any]]) -> bool:
    last = messages[-1] if messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, str) and content.startswith(PREFIX_INSTRUCTION)


def _answer(body: bytes, status: int = 200) -> BufferedResponse:
    """An upstream answer of ``body`` (JSON)."""
    return BufferedResponse(status, [(b"content-type", b"application/json")], body)


class RecordingUpstream:
    """An ``UpstreamClient`` that keeps every conversation body the proxy would have sent and
    answers it with a canned completion. A summary the proxy asks of the conversation's model on
    its cached prefix (``summarizer.cached_prefix``) is what is evaluated, so it goes to the real
    model (``model_call``) and is kept with its answer. Once ``live`` is set (eval --recall), it
    sends to that instead."""

    def __init__(self, model_call: Callable[[bytes], Awaitable[bytes]] | None = None) -> None:
        self.last: dict[str, Any] | None = None
        self.sent = 0
        self.prompts: list[list[dict[str, Any]]] = []  # each conversation request's messages
        # Each summary asked on the prefix: its messages and its answer's text.
        self.prefix_summaries: list[tuple[list[dict[str, Any]], str]] = []
        self._model_call = model_call
        self.live: Any = None  # an UpstreamClient: the model under test (eval --recall)

    async def send(self, method: str, url: str, headers: RawHeaders, body: Body) -> Any:
        if self.live is not None:
            return await self.live.send(method, url, headers, body)
        if isinstance(body, bytes):
            data = body
        elif body is None:
            data = b""
        else:
            data = b"".join([chunk async for chunk in body])
        if not url.endswith("/chat/completions"):  # the window discovery's /models
            return _answer(_CANNED)
        parsed = json.loads(data) if data else None
        messages = (parsed or {}).get("messages") or []
        if _asks_for_summary(messages):
            return await self._summary_on_prefix(messages, data)
        self.last = parsed
        self.sent += 1
        self.prompts.append(messages)
        return _answer(_CANNED)

    async def _summary_on_prefix(self, messages: list[dict[str, Any]], data: bytes) -> Any:
        if self._model_call is None:
            return _answer(_NOT_SERVED, 503)  # the proxy falls back to its quoted summarizer
        try:
            answer = await self._model_call(data)
        except (httpx.HTTPError, EvaluationError):
            return _answer(_NOT_SERVED, 503)  # the proxy falls back to its quoted summarizer
        try:
            text = json.loads(answer)["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            text = ""
        self.prefix_summaries.append((messages, text))
        return _answer(answer)

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class Replayed:
    """What the proxy made of one transcript under one policy."""

    history: list[dict[str, Any]]  # the compacted history (before the question)
    outcome: str  # X-Compaction of the last request: applied, skipped, failed, off
    requests: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    summarizer_calls: int
    # What was sent (each request's messages) and what the client sent (its full histories).
    sent: tuple[list[dict[str, Any]], ...] = ()
    direct: tuple[list[dict[str, Any]], ...] = ()
    # Summaries asked on the cached prefix: their messages and their answer's text.
    prefix_summaries: tuple[tuple[list[dict[str, Any]], str], ...] = ()
    after: Any = None  # what ``then`` returned (eval --recall: the probes asked through it)


@dataclass(frozen=True)
class Then:
    """What to do with a replayed app before it closes (see ``replay``)."""

    live: Any  # the UpstreamClient the app sends to from then on
    ask: Callable[[httpx.AsyncClient, dict[str, str]], Awaitable[Any]]


def eval_settings(settings: Settings, *, model: str, context_window: int | None) -> Settings:
    """The user's settings with a private memory store and, if asked, the model's window."""
    # A fixed secret for the run: without one, every replayed app would warn that it made one.
    store = {"url": "memory://", "tenant_secret": SecretStr(secrets.token_hex(32))}
    update: dict[str, Any] = {"store": settings.store.model_copy(update=store)}
    if context_window:
        known = lookup_model(model, settings.model_table())
        encoding = known.encoding if known else TokenCounter().encoding_name(model)
        info = ModelInfo(context_window=context_window, encoding=encoding)
        update["models"] = {model: info, **settings.models}
    return settings.model_copy(update=update)


def request_points(messages: list[dict[str, Any]]) -> list[int]:
    """Where the client sent a request: before each assistant message (after the first turn)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]


async def replay(
    settings: Settings,
    transcript: Transcript,
    *,
    policy: str | None,
    model: str,
    authorization: str | None,
    on_request: Callable[[], None] = lambda: None,
    then: Then | None = None,
) -> Replayed:
    """Send ``transcript`` through a fresh app built from ``settings`` (see ``eval_settings``).
    ``then``: once replayed, the app's upstream goes live (``then.live``) and ``then.ask`` is
    called with a client of the app and the replay's headers."""
    recorder = RecordingUpstream(_model_call(settings, authorization))
    app = create_app(settings, upstream=recorder)
    conversation = _UNSAFE_ID.sub("-", f"eval-{transcript.name}-{policy or 'routed'}")[:128]
    headers = {settings.conversation.own_header: conversation}
    if policy is not None:
        headers[POLICY_HEADER] = policy
    if authorization:
        headers["Authorization"] = authorization
    messages = transcript.messages
    placeholder = {"role": "user", "content": PLACEHOLDER}
    bodies = [messages[:end] for end in request_points(messages)] + [[*messages, placeholder]]
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://eval.invalid") as client,
    ):
        outcome = ""
        for history in bodies:
            body: dict[str, Any] = {"model": model, "messages": history}
            if transcript.tools:
                body["tools"] = transcript.tools
            response = await client.post("/v1/chat/completions", json=body, headers=headers)
            if response.status_code != 200:
                raise EvaluationError(
                    f"the proxy refused a replayed request of {transcript.name} "
                    f"(HTTP {response.status_code}): {response.text[:300]}"
                )
            outcome = response.headers.get(protocol.SWITCH, "")
            await _settle(client, settings.summarizer.timeout_seconds * 2)
            on_request()
        metrics = await _metrics(client)
        sent = (recorder.last or {}).get("messages") or []
        after = None
        if then is not None:
            recorder.live = then.live
            after = await then.ask(client, headers)
    if not sent or sent[-1] != placeholder:
        raise EvaluationError(f"the proxy did not keep the newest message of {transcript.name}")
    return Replayed(
        history=sent[:-1],
        outcome=outcome,
        requests=len(bodies),
        summarizer_input_tokens=int(metrics.get(("proxy_summarizer_tokens_total", "input"), 0)),
        summarizer_output_tokens=int(metrics.get(("proxy_summarizer_tokens_total", "output"), 0)),
        summarizer_calls=int(metrics.get(("proxy_summarizer_calls_total", "ok"), 0)),
        sent=tuple(recorder.prompts),
        direct=tuple(bodies),
        prefix_summaries=tuple(recorder.prefix_summaries),
        after=after,
    )


def _model_call(
    settings: Settings, authorization: str | None
) -> Callable[[bytes], Awaitable[bytes]]:
    """Sends a summary asked on the prefix to the model under test, as the proxy would."""
    url = settings.upstream.base_url.rstrip("/") + "/chat/completions"
    key = settings.upstream.api_key
    auth = f"Bearer {key.get_secret_value()}" if key is not None else authorization
    headers = {"content-type": "application/json", **({"authorization": auth} if auth else {})}

    async def call(body: bytes) -> bytes:
        async with httpx.AsyncClient(timeout=settings.summarizer.timeout_seconds) as client:
            response = await client.post(url, content=body, headers=headers)
        if response.status_code >= 400:
            raise EvaluationError(f"a summary on the prefix failed: HTTP {response.status_code}")
        return response.content

    return call


async def _metrics(client: httpx.AsyncClient) -> dict[tuple[str, str], float]:
    """The app's counters that matter here, by (sample name, first label value), summed."""
    text = (await client.get("/metrics")).text
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = sample.labels.get("kind") or sample.labels.get("outcome") or ""
            key = (sample.name, label)
            found[key] = found.get(key, 0.0) + sample.value
    return found


async def _settle(client: httpx.AsyncClient, seconds: float) -> None:
    """Wait until no ahead-of-time summary is queued or running."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = _DEPTH.search((await client.get("/metrics")).text)
        if found is None or not float(found.group(1)):
            return
        await asyncio.sleep(_SETTLE_POLL_SECONDS)
    raise EvaluationError("an ahead-of-time summary did not finish in time")
