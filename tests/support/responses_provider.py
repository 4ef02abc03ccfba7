"""A scripted provider of OpenAI's Responses API (``POST /v1/responses``) for the dialect tests.

It plays a reasoning model the way a strict provider checks its input: every tool output needs
its call earlier in ``input``, and a reasoning item it emitted must come back directly before
the call it emitted with it (the real API refuses a call without its reasoning item, or a
reasoning item without its following item). Its own reading of the items, independent of the
proxy's adapter. Everything else (the summarizer's chat calls, /models) goes to the chat
``Provider``.

While the input holds a user message with ``AGENT`` in it and ends with that message or a tool
output, every answer is a reasoning item plus one ``run_tests`` call; otherwise a text message.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply, sse_reply
from tests.support.provider import Provider

INSTRUCTIONS = "You are a careful coding agent."
TASK = {"type": "message", "role": "user", "content": "AGENT: fix the failing tests"}
TOOLS = [
    {
        "type": "function",
        "name": "run_tests",
        "parameters": {"type": "object", "properties": {}},
    }
]
OVERFLOW = {
    "error": {
        "message": "Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def _is_user(item: dict[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type", "message") == "message"


class ResponsesProvider:
    def __init__(self, mock: MockUpstream) -> None:
        self.mock = mock
        self.chat = Provider(mock)  # sets mock.default to itself: take it over
        mock.default = self
        self.max_items: int | None = None  # more input items is a context_length_exceeded
        # A streamed request over the window: 200, then response.failed (as OpenAI may answer).
        self.overflow_in_stream = False
        self.stream_pieces = ["done", ": ", "ok"]
        # A reasoning model thinking: seconds between the opening events and the first output
        # (or, with ``overflow_in_stream``, the failure).
        self.think_seconds = 0.0
        self.sent_streams: list[bytes] = []  # each streamed body exactly as sent
        self.refusals: list[str] = []  # why an input was refused as malformed
        self._pairs: dict[str, str] = {}  # call_id -> id of the reasoning item emitted with it
        self._calls = 0
        self._lock = threading.Lock()

    def __call__(self, request: Received) -> Reply:
        if not request.path.endswith("/responses"):
            return self.chat(request)
        body = request.json()
        items = body.get("input")
        if isinstance(items, list) and body.get("previous_response_id") is None:
            problem = self._malformed(items)
            if problem is not None:
                with self._lock:
                    self.refusals.append(problem)
                error = {"message": problem, "type": "invalid_request_error", "param": "input"}
                return json_reply({"error": {**error, "code": None}}, status=400)
            if self.max_items is not None and len(items) > self.max_items:
                if body.get("stream") and self.overflow_in_stream:
                    return self._failed_stream(body)
                return json_reply(OVERFLOW, status=400)
        else:
            items = [{"type": "message", "role": "user", "content": str(items)}]
        if self._agent_running(items):
            output = self._next_call()
        else:
            text = f"done: saw {len(items)} items"
            output = [
                {
                    "type": "message",
                    "id": "msg_mock",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ]
        response = self._response(body, output, len(items))
        if body.get("stream"):
            return self._stream(response)
        return json_reply(response)

    # --- what a strict provider refuses -------------------------------------------------------

    def _malformed(self, items: list[Any]) -> str | None:
        calls: set[str] = set()
        for i, item in enumerate(items):
            kind = item.get("type", "message")
            if kind == "function_call":
                calls.add(item["call_id"])
                reasoning = self._pairs.get(item["call_id"])
                before = items[i - 1] if i > 0 else {}
                if reasoning is not None and before.get("id") != reasoning:
                    return f"function_call {item['call_id']} without its reasoning item"
            elif kind == "function_call_output" and item["call_id"] not in calls:
                return f"No tool call found for function call output {item['call_id']}"
            elif kind == "reasoning":
                after = items[i + 1] if i + 1 < len(items) else {}
                if after.get("type") != "function_call" or self._pairs.get(
                    after.get("call_id")
                ) != item.get("id"):
                    return f"reasoning item {item.get('id')} without its required following item"
        return None

    # --- answers --------------------------------------------------------------------------------

    def _agent_running(self, items: list[dict[str, Any]]) -> bool:
        last = items[-1]
        if not (_is_user(last) or last.get("type") == "function_call_output"):
            return False
        return any(_is_user(i) and "AGENT" in _text_of(i.get("content")) for i in items)

    def _next_call(self) -> list[dict[str, Any]]:
        with self._lock:
            self._calls += 1
            n = self._calls
            self._pairs[f"call_run_{n}"] = f"rs_{n}"
        return [
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": f"attempt {n}: run the tests"}],
                "encrypted_content": f"gAAAA-opaque-{n}-" + "x" * 40,
            },
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_run_{n}",
                "name": "run_tests",
                "arguments": json.dumps({"attempt": n}),
                "status": "completed",
            },
        ]

    def _response(
        self, body: dict[str, Any], output: list[dict[str, Any]], n_items: int
    ) -> dict[str, Any]:
        return {
            "id": "resp_mock",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "metadata": {},
            "model": body.get("model", "mock-model"),
            "output": output,
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "usage": {
                "input_tokens": 100 + n_items,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 105 + n_items,
            },
        }

    def _failed_stream(self, body: dict[str, Any]) -> Reply:
        response = self._response(body, [], 0)
        failed = {**response, "status": "failed", "error": OVERFLOW["error"], "usage": None}
        created = {**response, "status": "in_progress", "usage": None}
        opening = _events(
            [
                ("response.created", {"response": created}),
                ("response.in_progress", {"response": created}),
            ]
        )
        failure = _events([("response.failed", {"response": failed})], first=2)
        return sse_reply([*opening, self.think_seconds, *failure])

    def _stream(self, response: dict[str, Any]) -> Reply:
        """The events OpenAI streams, in its order (what the SDK's stream helper checks): the
        opening ones, each output item added, its text as deltas, done, then the response."""
        created = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": created}),
            ("response.in_progress", {"response": created}),
        ]
        for index, item in enumerate(response["output"]):
            if item["type"] != "message":
                events.append(("response.output_item.added", {"output_index": index, "item": item}))
                events.append(("response.output_item.done", {"output_index": index, "item": item}))
                continue
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            text = "".join(self.stream_pieces)
            part = {"type": "output_text", "text": "", "annotations": []}
            started = {**item, "status": "in_progress", "content": []}
            events.append(("response.output_item.added", {"output_index": index, "item": started}))
            events.append(("response.content_part.added", {**at, "part": part}))
            events += [
                ("response.output_text.delta", {**at, "delta": p}) for p in self.stream_pieces
            ]
            events.append(("response.output_text.done", {**at, "text": text}))
            events.append(("response.content_part.done", {**at, "part": {**part, "text": text}}))
            done = {**item, "content": [{**part, "text": text}]}
            events.append(("response.output_item.done", {"output_index": index, "item": done}))
        events.append(("response.completed", {"response": response}))
        chunks = _events(events)
        with self._lock:
            self.sent_streams.append(b"".join(chunks))
        return sse_reply([*chunks[:2], self.think_seconds, *chunks[2:]])

    # --- what was received ----------------------------------------------------------------------

    def responses_requests(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.mock.received if r.path.endswith("/responses")]

    def raw_responses_requests(self) -> list[bytes]:
        return [r.body for r in self.mock.received if r.path.endswith("/responses")]


def _events(events: list[tuple[str, dict[str, Any]]], *, first: int = 0) -> list[bytes]:
    """One SSE chunk per event, as OpenAI writes them: ``event:`` and ``data:`` lines."""
    return [
        f"event: {name}\ndata: {json.dumps({'type': name, 'sequence_number': i, **data})}\n\n".encode()
        for i, (name, data) in enumerate(events, start=first)
    ]


DEVELOPER = {"type": "message", "role": "developer", "content": "Run the tests after each edit."}


def long_input() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [DEVELOPER]
    for turn in range(12):
        items.append(
            {"type": "message", "role": "user", "content": f"Step {turn}: edit file {turn}"}
        )
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"edited {turn}", "annotations": []}],
            }
        )
    items.append({"type": "message", "role": "user", "content": "last step"})
    return items
