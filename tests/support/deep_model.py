"""A model that nests what it writes a thousand deep, on the three routes: while the
request offers the recall tool and ends with the user's turn, it calls recall (or, ``name``,
another tool) with arguments nested ``DEPTH`` deep; otherwise it answers ``AFTER``. For the
recall tests and the fault suite, plain and streamed."""

from __future__ import annotations

from typing import Any

from tests.support.anthropic_provider import message
from tests.support.dialect_streams import (
    anthropic_stream,
    response_body,
    responses_stream,
    responses_text_item,
)
from tests.support.mock_upstream import (
    Received,
    Reply,
    completion,
    json_reply,
    sse_chunks,
    sse_reply,
)
from tests.support.recall_model import TOOL, chat_tool_stream, declares

DEPTH = 1000
DEEP = "[" * DEPTH + "]" * DEPTH  # valid JSON, nested a thousand deep
DEEP_ARGS = '{"id": ' + DEEP + "}"
AFTER = "after all"
_PLACEHOLDER = "DEEP-INPUT-HERE"


class DeepModel:
    """A MockUpstream script (``mock.default = DeepModel()``) for every route."""

    def __init__(self, name: str = TOOL) -> None:
        self.name = name

    def __call__(self, request: Received) -> Reply:
        body = request.json()
        stream = bool(body.get("stream"))
        if request.path.endswith("/messages"):
            return self._anthropic(body, stream)
        if request.path.endswith("/responses"):
            last = (body.get("input") or [{}])[-1]
            calling = self._calls(body) and last.get("role") == "user"
            item = _responses_call(self.name) if calling else responses_text_item(AFTER)
            return (
                sse_reply(responses_stream([item])) if stream else json_reply(response_body([item]))
            )
        calling = self._calls(body) and body["messages"][-1]["role"] == "user"
        if not calling:
            return (
                sse_reply(sse_chunks([AFTER[:3], AFTER[3:]]))
                if stream
                else json_reply(completion(AFTER))
            )
        call = {
            "id": "call_deep",
            "type": "function",
            "function": {"name": self.name, "arguments": DEEP_ARGS},
        }
        if stream:
            return sse_reply(chat_tool_stream([call]))
        return json_reply(completion("", tool_calls=[call]))

    def _calls(self, body: dict[str, Any]) -> bool:
        none = body.get("tool_choice") in ("none", {"type": "none"})
        return declares(body.get("tools")) and not none

    def _anthropic(self, body: dict[str, Any], stream: bool) -> Reply:
        last = body["messages"][-1]
        if self._calls(body) and isinstance(last["content"], str):
            blocks = [
                {"type": "tool_use", "id": "toolu_d", "name": self.name, "input": _PLACEHOLDER}
            ]
        else:
            blocks = [{"type": "text", "text": AFTER}]
        if stream:
            return deepened(sse_reply(anthropic_stream(blocks)))
        stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
        return deepened(json_reply(message(blocks, model=body["model"], stop=stop)))


def _responses_call(name: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_deep",
        "call_id": "call_deep",
        "name": name,
        "arguments": DEEP_ARGS,
        "status": "completed",
    }


def deepened(reply: Reply) -> Reply:
    """``reply`` with the placeholder input replaced by JSON nested ``DEPTH`` deep (a body the
    test's own json could not write)."""
    chunks: list[bytes | float] = []
    for chunk in reply.chunks:
        if isinstance(chunk, bytes):
            chunk = chunk.replace(b'\\"' + _PLACEHOLDER.encode() + b'\\"', DEEP.encode())
            chunk = chunk.replace(b'"' + _PLACEHOLDER.encode() + b'"', DEEP.encode())
        chunks.append(chunk)
    return Reply(status=reply.status, headers=reply.headers, chunks=chunks)


def answered_bytes(reply: Reply) -> bytes:
    """What a reply sends, all of it."""
    return b"".join(c for c in reply.chunks if isinstance(c, bytes))
