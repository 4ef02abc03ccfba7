"""A provider with a real context window, for the window and calibration tests.

On top of the scripted Provider (summaries, tool calls) it counts every prompt with tiktoken
(o200k, exactly as the proxy counts what it sends), refuses a prompt over its window with
OpenAI's ``context_length_exceeded`` answer, reports ``usage.prompt_tokens`` as its own
tokenizer would (``usage_factor`` times that count), and serves ``/v1/models`` as the test
describes it (vLLM's ``max_model_len``, nothing, or a listing that hangs).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import openai

from proxy.core.tokens import TokenCounter
from tests.support.mock_upstream import (
    MockUpstream,
    Received,
    Reply,
    json_reply,
    sse_chunks,
    sse_reply,
)
from tests.support.provider import SUMMARIZER_MODEL, Provider, take_turn


class WindowedProvider(Provider):
    def __init__(
        self,
        mock: MockUpstream,
        *,
        window: int,
        listing: list[dict[str, Any]] | None = None,
        usage_factor: float = 1.0,
    ) -> None:
        super().__init__(mock)
        self.window = window
        self.listing = listing  # None: /v1/models answers 404
        self.listing_delay = 0.0
        self.usage_factor = usage_factor
        self.counter = TokenCounter()
        self.prompts: list[int] = []  # every conversation prompt, in provider tokens
        self.over_window: list[int] = []
        self._count_lock = threading.Lock()

    def models_requests(self) -> list[Received]:
        return [r for r in self.mock.received if r.path.endswith("/models")]

    def __call__(self, request: Received) -> Reply:
        if request.path.endswith("/models"):
            if self.listing is None:
                return json_reply({"error": {"message": "not found"}}, status=404)
            reply = json_reply({"object": "list", "data": self.listing})
            reply.delay = self.listing_delay
            return reply
        if not request.path.endswith("/chat/completions"):
            return super().__call__(request)
        body = request.json()
        if body.get("model") == SUMMARIZER_MODEL:
            return super().__call__(request)
        counted = self.counter.count_messages(body["messages"], "gpt-4o")
        counted += self.counter.count_tools(body.get("tools"), "gpt-4o")
        tokens = round(counted * self.usage_factor)
        with self._count_lock:
            self.prompts.append(tokens)
            if tokens > self.window:
                self.over_window.append(tokens)
        if tokens > self.window:
            message = (
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            return json_reply({"error": error}, status=400)
        usage = {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}
        if body.get("stream"):
            chunks = sse_chunks(["done: ", "streamed"], model=body["model"])
            if (body.get("stream_options") or {}).get("include_usage"):
                final = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage,
                }
                chunks.insert(-1, f"data: {json.dumps(final)}\n\n".encode())
            return sse_reply(chunks)
        reply = super().__call__(request)
        answer = json.loads(reply.chunks[0])  # type: ignore[arg-type]
        answer["usage"] = usage
        return json_reply(answer)


PADDING = (
    "The module keeps its state in one small class; every public function validates its "
    "arguments, logs what it changed and returns a result object the caller can inspect. "
)


def agent_turn(
    client: openai.OpenAI, history: list[dict[str, Any]], turn: int, *, model: str
) -> list[dict[str, str]]:
    """One user turn of an agent run (a tool round every other turn, with large results);
    appends to ``history``; returns the response headers of each call."""
    text = f"Step {turn}: refactor src/module_{turn}.py. {PADDING * 2}" + (
        " TOOL" if turn % 2 else ""
    )
    return take_turn(client, history, text, model=model, tool_output=": " + PADDING * 3)
