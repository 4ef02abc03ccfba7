"""A scripted Anthropic Messages provider for the dialect tests, served on its own port (the
proxy's ``upstream.anthropic_base_url``), on top of MockUpstream.

It reads requests with its own translation, written from Anthropic's API reference and never
from the proxy's adapter, and refuses what the real API refuses: a first turn that is not the
user's, a ``tool_result`` that does not answer a ``tool_use`` of the assistant turn just before
it, a ``tool_use`` left unanswered by the next turn, a ``role: "system"`` message out of its
place (``system_placement``), more than four ``cache_control`` marks, a
mark of an hour's TTL after one of five minutes. A refusal is a 400 in Anthropic's shape, so
a test that sees one knows the proxy sent something invalid.

Replies: a user text with ``TOOL`` starts a run of tool rounds (each reply a signed ``thinking``
block and one ``read_file`` call) that goes on until a tool result says ``LAST``; any other turn
gets ``done: saw K messages``, streamed as Anthropic's SSE events when asked. Over
``max_messages`` it answers Anthropic's overflow 400 ("prompt is too long: N tokens > M
maximum").
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply, sse_reply

SUMMARY_OPEN = "<agent_summary>"


def error(message: str, kind: str = "invalid_request_error", status: int = 400) -> Reply:
    return json_reply({"type": "error", "error": {"type": kind, "message": message}}, status)


DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 5}


def message(
    content: list[dict[str, Any]],
    *,
    model: str,
    stop: str = "end_turn",
    usage: dict[str, int] | None = None,
) -> dict:
    return {
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": dict(usage or DEFAULT_USAGE),
    }


def sse_events(
    text: str,
    *,
    model: str,
    pieces: list[str] | None = None,
    usage: dict[str, int] | None = None,
) -> list[bytes | float]:
    """A streamed text answer as Anthropic's event sequence: ``pieces`` (default: ``text`` in
    two), and ``usage`` as the API reports it (``message_start`` states the input figures with
    1 output token when ``usage`` is given; ``message_delta`` the output tokens)."""
    start = message([], model=model, usage=usage)
    start["stop_reason"] = None
    if usage is not None:
        start["usage"]["output_tokens"] = 1
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for piece in pieces if pieces is not None else (text[:5], text[5:]):
        delta = {"type": "text_delta", "text": piece}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": (usage or DEFAULT_USAGE)["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


def blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def cache_marks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's cache_control marks in prompt order: tools, system, messages (nested tool
    result blocks too), then the top-level one (it lands on the last cacheable block)."""

    def within(items: object) -> list[dict[str, Any]]:
        found = []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                if item.get("cache_control"):
                    found.append(item["cache_control"])
                found += within(item.get("content"))
        return found

    marks = within(body.get("tools")) + within(body.get("system"))
    for turn in body.get("messages") or []:
        marks += within(turn.get("content"))
    return marks + ([body["cache_control"]] if body.get("cache_control") else [])


def mark_problems(body: dict[str, Any]) -> list[str]:
    """What the real API would refuse in this request's cache marks."""
    found = []
    marks = cache_marks(body)
    if len(marks) > 4:
        found.append(f"A maximum of 4 blocks with cache_control may be provided: {len(marks)}")
    ttls = [m.get("ttl", "5m") for m in marks]
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        found.append("a cache_control of ttl 1h must not come after one of ttl 5m")
    return found


def problems(body: dict[str, Any]) -> list[str]:
    """What the real API would refuse in this request's conversation."""
    found = []
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        found.append("the first message must be the user's")
    found += system_placement(messages)
    open_calls: set[str] = set()
    for i, turn in enumerate(messages):
        if turn.get("role") == "system":
            continue  # placed by its own rule (system_placement), between the turns
        content = blocks(turn.get("content"))
        results = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
        if turn.get("role") == "user":
            if results - open_calls:
                found.append(f"messages.{i}: tool_result without a tool_use just before it")
            if open_calls - results:
                found.append(f"messages.{i - 1}: tool_use without its tool_result")
            open_calls = set()
        else:
            if open_calls:
                found.append(f"messages.{i - 1}: tool_use without its tool_result")
            open_calls = {b["id"] for b in content if b.get("type") == "tool_use"}
    return found


def system_placement(messages: list[dict[str, Any]]) -> list[str]:
    """Where the API refuses a ``role: "system"`` message (Anthropic's "Mid-conversation system
    messages", Limitations): never the first entry; a run of them (one system section) must
    immediately follow a user turn (tool results included) or an assistant turn ending in a
    server tool result, and must precede an assistant turn or end the array."""
    found = []
    i = 0
    while i < len(messages):
        if messages[i].get("role") != "system":
            i += 1
            continue
        end = i
        while end < len(messages) and messages[end].get("role") == "system":
            end += 1
        before = messages[i - 1] if i else None
        after = messages[end] if end < len(messages) else None
        last = blocks(before.get("content"))[-1:] if before else []
        server_result = bool(last) and str(last[0].get("type", "")).endswith("_tool_result")
        if before is None:
            found.append(f"messages.{i}: a system message cannot be the first entry")
        elif not (before.get("role") == "user" or server_result):
            found.append(f"messages.{i}: a system message must follow a user turn")
        if after is not None and after.get("role") != "assistant":
            found.append(f"messages.{i}: a system message must precede an assistant turn")
        i = end
    return found


def system_texts(body: dict[str, Any]) -> list[str]:
    system = body.get("system")
    if system is None:
        return []
    if isinstance(system, str):
        return [system]
    return [b["text"] for b in system]


def summaries_in(body: dict[str, Any]) -> list[str]:
    """System texts that are summaries (the proxy's tag)."""
    return [t for t in system_texts(body) if t.startswith(SUMMARY_OPEN)]


class AnthropicProvider:
    def __init__(self, mock: MockUpstream) -> None:
        self.mock = mock
        self.max_messages: int | None = None
        self._calls = 0
        self._lock = threading.Lock()
        mock.default = self

    def __call__(self, request: Received) -> Reply:
        if request.path == "/v1/messages/count_tokens":
            return json_reply({"input_tokens": len(request.body)})
        if request.path != "/v1/messages" or request.method != "POST":
            return error(f"{request.method} {request.path}: not found", "not_found_error", 404)
        body = request.json()
        refused = problems(body) + mark_problems(body)
        if refused:
            return error("; ".join(refused))
        messages = body["messages"]
        model = body.get("model", "claude-mock")
        if self.max_messages is not None and len(messages) > self.max_messages:
            tokens = 1000 * len(messages)
            return error(
                f"prompt is too long: {tokens} tokens > {1000 * self.max_messages} maximum"
            )
        wanted = self._rounds_wanted(messages)
        if wanted:
            with self._lock:
                self._calls += 1
                n = self._calls
            content = [
                {
                    "type": "thinking",
                    "thinking": f"round {n}: read a file",
                    "signature": f"sig-{n}",
                },
                {
                    "type": "tool_use",
                    "id": f"toolu_{n}",
                    "name": "read_file",
                    "input": {"path": f"src/f{n}.py", "limits": {"lines": 40}},
                },
            ]
            return json_reply(message(content, model=model, stop="tool_use"))
        text = f"done: saw {len(messages)} messages"
        if body.get("stream"):
            return sse_reply(sse_events(text, model=model))
        return json_reply(message([{"type": "text", "text": text}], model=model))

    @staticmethod
    def _rounds_wanted(messages: list[dict[str, Any]]) -> bool:
        """Another tool round: the last turn is a user text asking for tools, or tool results
        none of which says it was the ``LAST`` (the client decides when its run ends)."""
        turns = [m for m in messages if m.get("role") != "system"]  # instructions, not turns
        content = blocks(turns[-1].get("content")) if turns else []
        results = [b for b in content if b.get("type") == "tool_result"]
        if results:
            return "LAST" not in json.dumps(results)
        return any(b.get("type") == "text" and "TOOL" in b["text"] for b in content)

    def requests(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.mock.received if r.path == "/v1/messages"]
