"""Codex's own compaction prompt on ``/v1/responses``, recognised and answered
(``proxy.compaction.agents.own_compaction.AgentAsk``; docs/agent-compaction.md).

Where Codex compacts locally (not through ``/v1/responses/compact``), it sends its history as
``input`` with one more user message: its compaction prompt, which opens (Codex 0.171, read from
its binary) "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for
another LLM that will resume the task." It keeps the text of the answer's assistant message as
the summary, so the answer is one assistant message holding the summary: a Responses object, or
its SSE events when ``stream`` is set (``response.created`` to ``response.completed``, as
openai-python 3.57's ``types/responses/response_stream_event.py`` lists them).
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.compaction.decision import LocalReply
from proxy.dialects.responses_compact import NO_USAGE

PROMPT = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another "
    "LLM that will resume the task."
)
_OPENING = PROMPT.encode()


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


class CodexAsk:
    """Codex's compaction prompt (``AgentAsk``)."""

    def might_be(self, raw: bytes) -> bool:
        return _OPENING in raw

    def history(self, body: dict[str, Any]) -> dict[str, Any] | None:
        items = body.get("input")
        if not isinstance(items, list) or len(items) < 2:
            return None
        last = items[-1]
        is_user = (
            isinstance(last, dict)
            and last.get("role") == "user"
            and last.get("type", "message") == "message"
        )
        if not is_user or not _text(last.get("content")).lstrip().startswith(PROMPT):
            return None
        return {**body, "input": items[:-1]}

    def reply(self, body: dict[str, Any], summary: str, *, reply_id: str) -> LocalReply:
        message_id = f"msg_{reply_id}"
        part = {"type": "output_text", "text": summary, "annotations": []}
        message = {
            "type": "message",
            "id": message_id,
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        response = {
            "id": f"resp_{reply_id}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model") if isinstance(body.get("model"), str) else "",
            "output": [message],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": NO_USAGE,
        }
        if body.get("stream") is not True:
            return LocalReply(json.dumps(response).encode())
        at = {"item_id": message_id, "output_index": 0, "content_index": 0}
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": started},
            {"type": "response.in_progress", "response": started},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**message, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "delta": summary, "logprobs": []},
            {"type": "response.output_text.done", **at, "text": summary, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.completed", "response": response},
        ]
        stream = b"".join(
            b"event: %s\ndata: %s\n\n"
            % (event["type"].encode(), json.dumps({**event, "sequence_number": n}).encode())
            for n, event in enumerate(events)
        )
        return LocalReply(stream, content_type=b"text/event-stream")


CODEX = CodexAsk()
