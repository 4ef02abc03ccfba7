"""Claude Code's own compaction request on ``/v1/messages``, recognised and answered
(``proxy.compaction.agents.own_compaction.AgentAsk``; docs/agent-compaction.md).

What Claude Code 2.1.197 sends (read from its package): the conversation as always, then one more
user message whose last text block is its summary prompt, after a "respond with text only"
preamble. Two of its prompts ask for a summary of everything sent: "...of the conversation so
far..." (``/compact`` and the automatic compaction) and "...of this conversation. This summary
will be placed at the start of a continuing session..." (a compaction up to a chosen message).
The third ("...of the RECENT portion of the conversation...") keeps the earlier turns: the proxy's
summary covers those, not the portion asked, so it is never answered here. Consecutive user
messages are merged by Claude Code, so the prompt may follow tool results in the same message:
they stay in the history.

Claude Code reads the answer's text, takes what stands between ``<summary>`` and ``</summary>``
and drops any ``<analysis>`` block: the answer is one text block holding the summary in those
tags, as a Messages response (or its SSE stream when ``stream`` is set).
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.compaction.decision import LocalReply

_OPENING = b"Your task is to create a detailed summary of "
_WHOLE_HISTORY = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions.",
    "Your task is to create a detailed summary of this conversation. This summary will be "
    "placed at the start of a continuing session",
)
_SUMMARY_TAG = re.compile(r"<(/?)summary>", re.IGNORECASE)


def _asks_summary(block: object) -> bool:
    """A text whose words are one of Claude Code's whole-history prompts, answer format and all."""
    text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else block
    return (
        isinstance(text, str)
        and any(prompt in text for prompt in _WHOLE_HISTORY)
        and "<summary>" in text
    )


class ClaudeCodeAsk:
    """Claude Code's summary request (``AgentAsk``)."""

    def might_be(self, raw: bytes) -> bool:
        return _OPENING in raw

    def history(self, body: dict[str, Any]) -> dict[str, Any] | None:
        messages = body.get("messages")
        if not isinstance(messages, list) or len(messages) < 2:
            return None
        last = messages[-1]
        if not isinstance(last, dict) or last.get("role") != "user":
            return None
        content = last.get("content")
        if isinstance(content, str):
            return {**body, "messages": messages[:-1]} if _asks_summary(content) else None
        if not isinstance(content, list):
            return None
        texts = [
            i for i, b in enumerate(content) if isinstance(b, dict) and b.get("type") == "text"
        ]
        asking = next((i for i in texts if _asks_summary(content[i])), None)
        if asking is None or any(b.get("type") != "text" for b in content[asking:]):
            return None  # the prompt and any instructions after it end the message, or not ours
        kept = content[:asking]
        rest = [{**last, "content": kept}] if kept else []
        return {**body, "messages": [*messages[:-1], *rest]}

    def reply(self, body: dict[str, Any], summary: str, *, reply_id: str) -> LocalReply:
        # A tag inside the summary would end Claude Code's reading of it early.
        text = "<summary>\n" + _SUMMARY_TAG.sub(r"&lt;\1summary>", summary.strip()) + "\n</summary>"
        model = body.get("model") if isinstance(body.get("model"), str) else ""
        usage = {"input_tokens": 0, "output_tokens": 0}
        message = {
            "id": f"msg_{reply_id}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if body.get("stream") is not True:
            return LocalReply(json.dumps(message).encode())
        start = {**message, "content": [], "stop_reason": None}
        events = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 0},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        stream = b"".join(
            b"event: %s\ndata: %s\n\n" % (name.encode(), json.dumps(data).encode())
            for name, data in events
        )
        return LocalReply(stream, content_type=b"text/event-stream")


CLAUDE_CODE = ClaudeCodeAsk()
