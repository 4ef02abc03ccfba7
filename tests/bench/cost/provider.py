"""A mock provider that bills like the real ones: prompt caching applied, usage reported as each
API reports it, plain and streamed, and every request's billing line recorded.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI's automatic caching),
``POST /v1/messages`` (Anthropic's breakpoints), ``GET /v1/models``. Serve ``.app`` with
tests.support.servers.ThreadedUvicorn.

Usage fields, from the SDKs' types:
- chat: ``usage.prompt_tokens`` (cached included), ``completion_tokens``, ``total_tokens``,
  ``prompt_tokens_details.cached_tokens`` (openai-python ``types/completion_usage.py``); streamed,
  one last chunk with empty ``choices`` carries it when ``stream_options.include_usage`` is set,
  and every other chunk has ``usage: null`` (``chat_completion_stream_options_param.py``);
- Responses: ``usage.input_tokens`` (cached included), ``input_tokens_details.cached_tokens``,
  ``output_tokens``, ``output_tokens_details.reasoning_tokens``, ``total_tokens``
  (``types/responses/response_usage.py``); streamed, in ``response.completed``;
- Messages: ``usage.input_tokens`` (after the last breakpoint), ``cache_creation_input_tokens``,
  ``cache_read_input_tokens``, ``output_tokens`` (anthropic-sdk-python ``types/usage.py``);
  streamed, in ``message_start`` and again, cumulative, in ``message_delta``
  (``types/message_delta_usage.py``).

Time is simulated: a request's moment is its ``X-Bench-Clock`` header (seconds), which clients
send and the proxy forwards; a request without it (the proxy's own summarizer calls) happens at
the last moment seen. What an answer costs in output is what the model would have written: the
``X-Bench-Output-Tokens`` header (the transcript's next assistant message), else the tokens of the
short fixed answer; the answer's text itself does not matter, the replayed transcript decides
what is sent next. Calls for ``summarizer_model``, and calls without ``X-Bench-Clock`` (the
proxy's summaries asked of the conversation's model on its cached prefix), are answered with a
summary of ``SUMMARY_FRACTION`` of their prompt (at most their ``max_tokens``), billed like any
call and counted as the summarizer's.
"""

from __future__ import annotations

import json
import random
import threading
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.bench.cost.caching import BreakpointCache, PrefixCache, TooManyBreakpoints, Usage
from tests.bench.cost.prompts import Tokenizer, chat_pieces, messages_blocks, responses_pieces

CLOCK_HEADER = "x-bench-clock"
OUTPUT_HEADER = "x-bench-output-tokens"
ANSWER = "Done: see above."
SUMMARY_FRACTION = 0.10
MIN_SUMMARY_TOKENS = 64
_WORDS = ("the agent", "read", "fixed", "file", "test", "failed", "passed", "module", "function",
          "changed", "error", "config", "user", "asked", "decided", "kept", "value", "path",
          "retry", "timeout", "handler", "request", "build", "next", "step", "open", "done",
          "because", "with", "and", "then", "after", "before", "in", "of", "to")  # fmt: skip


@dataclass(frozen=True, slots=True)
class BillingLine:
    """One request as the provider billed it."""

    route: str  # chat | responses | messages
    model: str
    usage: Usage
    output: int
    summarizer: bool
    at: float  # simulated seconds
    clocked: bool  # the request carried X-Bench-Clock
    streamed: bool


def _error(status: int, message: str, *, anthropic: bool) -> JSONResponse:
    if anthropic:
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    return JSONResponse(body, status_code=status)


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class CachingProvider:
    """The mock provider; thread-safe for a bench that reads its ledger while it serves."""

    def __init__(
        self,
        *,
        summarizer_model: str,
        models: tuple[str, ...] = (),
        max_summary_tokens: int | None = None,
    ) -> None:
        self.summarizer_model = summarizer_model
        # A real summarizer writes a few hundred tokens whatever max_tokens allows; None: a
        # summary is a tenth of its prompt up to the call's max_tokens.
        self.max_summary_tokens = max_summary_tokens
        self.models = (*models, summarizer_model)
        self.tokenizer = Tokenizer()
        self._lock = threading.Lock()
        self._lines: list[BillingLine] = []
        self._openai = PrefixCache()
        self._anthropic = BreakpointCache()
        self._now = 0.0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
            ]
        )

    def reset(self) -> None:
        """A new run: empty caches, no billing lines, the clock at 0."""
        with self._lock:
            self._lines = []
            self._openai = PrefixCache()
            self._anthropic = BreakpointCache()
            self._now = 0.0

    def lines(self) -> list[BillingLine]:
        with self._lock:
            return list(self._lines)

    # --- what every route shares ---------------------------------------------------------------

    def _clock(self, request: Request) -> tuple[float, bool]:
        value = request.headers.get(CLOCK_HEADER)
        with self._lock:
            if value is not None:
                self._now = float(value)
            return self._now, value is not None

    def _tokens(self, pieces: list[str]) -> array:
        tokens = array("I")
        for piece in pieces:
            tokens.extend(self.tokenizer.ids(piece))
        return tokens

    def _summary_call(self, request: Request, body: dict[str, Any]) -> bool:
        """A call of the proxy's own: for the summarizer's model, or one no client made (no
        ``X-Bench-Clock``: a summary asked of the conversation's model on its cached prefix)."""
        return body.get("model") == self.summarizer_model or CLOCK_HEADER not in request.headers

    def _answer(self, request: Request, body: dict[str, Any], usage: Usage) -> tuple[str, int]:
        """The answer's text and its output tokens."""
        if not self._summary_call(request, body):
            wanted = request.headers.get(OUTPUT_HEADER)
            return ANSWER, int(wanted) if wanted else self.tokenizer.count(ANSWER)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 4096
        size = min(int(limit), max(MIN_SUMMARY_TOKENS, int(usage.prompt * SUMMARY_FRACTION)))
        if self.max_summary_tokens is not None:
            size = min(size, self.max_summary_tokens)
        text = self._summary(size, seed=usage.prompt)
        return text, self.tokenizer.count(text)

    def _summary(self, size: int, *, seed: int) -> str:
        """About ``size`` tokens of bullet points, the same for the same seed."""
        rng = random.Random(seed)
        lines = []
        for n in range(0, size, 12):
            lines.append("- " + " ".join(rng.choice(_WORDS) for _ in range(10)) + f" (#{n}).")
        text = "\n".join(lines)
        ids = self.tokenizer.ids(text)
        return text if len(ids) <= size else self.tokenizer.decode(ids[:size])

    def _bill(
        self,
        request: Request,
        route: str,
        body: dict[str, Any],
        usage: Usage,
        output: int,
        at: float,
        clocked: bool,
    ) -> None:
        line = BillingLine(
            route=route,
            model=str(body.get("model", "")),
            usage=usage,
            output=output,
            summarizer=self._summary_call(request, body),
            at=at,
            clocked=clocked,
            streamed=bool(body.get("stream")),
        )
        with self._lock:
            self._lines.append(line)

    async def _body(self, request: Request) -> dict[str, Any] | None:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def _list_models(self, request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "bench"} for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data})

    # --- OpenAI ----------------------------------------------------------------------------------

    def _openai_usage(self, body: dict[str, Any], pieces: list[str], now: float) -> Usage:
        partition = ("openai", body.get("model"), body.get("prompt_cache_key"))
        tokens = self._tokens(pieces)
        with self._lock:
            return self._openai.request(partition, tokens, now)

    async def _chat(self, request: Request) -> Response:
        body = await self._body(request)
        if body is None or not isinstance(body.get("messages"), list):
            return _error(400, "a JSON object with messages is required", anthropic=False)
        now, clocked = self._clock(request)
        usage = self._openai_usage(body, chat_pieces(body), now)
        text, output = self._answer(request, body, usage)
        self._bill(request, "chat", body, usage, output, now, clocked)
        model = str(body.get("model", ""))
        figures = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": output,
            "total_tokens": usage.prompt + output,
            "prompt_tokens_details": {"cached_tokens": usage.cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        if not body.get("stream"):
            message = {"role": "assistant", "content": text, "refusal": None}
            choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            return JSONResponse(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [choice],
                    "usage": figures,
                }
            )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._chat_events(model, text, figures if with_usage else None),
            media_type="text/event-stream",
        )

    def _chat_events(self, model: str, text: str, usage: dict | None) -> Iterator[bytes]:
        def chunk(delta: dict | None, finish: str | None = None) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
            }
            out["choices"] = (
                []
                if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            )
            if usage is not None:
                out["usage"] = None
            return out

        yield _sse(chunk({"role": "assistant", "content": ""}))
        half = len(text) // 2
        yield _sse(chunk({"content": text[:half]}))
        yield _sse(chunk({"content": text[half:]}))
        yield _sse(chunk({}, "stop"))
        if usage is not None:
            yield _sse({**chunk(None), "usage": usage})
        yield b"data: [DONE]\n\n"

    async def _responses(self, request: Request) -> Response:
        body = await self._body(request)
        if body is None or "input" not in body:
            return _error(400, "a JSON object with input is required", anthropic=False)
        now, clocked = self._clock(request)
        usage = self._openai_usage(body, responses_pieces(body), now)
        text, output = self._answer(request, body, usage)
        self._bill(request, "responses", body, usage, output, now, clocked)
        response = {
            "id": "resp_bench",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": str(body.get("model", "")),
            "output": [
                {
                    "type": "message",
                    "id": "msg_bench",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage.prompt,
                "input_tokens_details": {"cached_tokens": usage.cached},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.prompt + output,
            },
        }
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(
            self._responses_events(response, text), media_type="text/event-stream"
        )

    def _responses_events(self, response: dict[str, Any], text: str) -> Iterator[bytes]:
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [
            {"type": "response.created", "response": started},
            {
                "type": "response.output_text.delta",
                "item_id": "msg_bench",
                "output_index": 0,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            },
            {"type": "response.completed", "response": response},
        ]
        for n, event in enumerate(events):
            yield _sse({**event, "sequence_number": n}, event["type"])

    # --- Anthropic -------------------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        body = await self._body(request)
        if body is None or not isinstance(body.get("messages"), list):
            return _error(400, "messages: Field required", anthropic=True)
        now, clocked = self._clock(request)
        blocks = messages_blocks(body)
        counts = [self.tokenizer.count(block.text) for block in blocks]
        try:
            with self._lock:
                usage = self._anthropic.request(
                    ("anthropic", body.get("model")), blocks, counts, now
                )
        except TooManyBreakpoints as exc:
            return _error(400, str(exc), anthropic=True)
        text, output = self._answer(request, body, usage)
        self._bill(request, "messages", body, usage, output, now, clocked)
        figures = {
            "input_tokens": usage.uncached,
            "cache_creation_input_tokens": usage.written,
            "cache_read_input_tokens": usage.cached,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage.written,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": output,
            "service_tier": "standard",
        }
        message = {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model", "")),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": figures,
        }
        if not body.get("stream"):
            return JSONResponse(message)
        return StreamingResponse(
            self._message_events(message, text), media_type="text/event-stream"
        )

    def _message_events(self, message: dict[str, Any], text: str) -> Iterator[bytes]:
        usage = message["usage"]
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        final = {
            k: usage[k]
            for k in (
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "output_tokens",
            )
        }
        events = [
            {"type": "message_start", "message": start},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": final,
            },
            {"type": "message_stop"},
        ]
        for event in events:
            yield _sse(event, event["type"])
