"""Streamed replies of the Anthropic Messages and Responses APIs as a mock provider sends them,
for the recall tests: a reply is a list of blocks (Anthropic) or output items (Responses), text
or tool calls, in order. ``pause`` seconds go by after the first text, so a test can tell what
the client had before the provider finished."""

from __future__ import annotations

import json
from typing import Any

from tests.support.anthropic_provider import message


def anthropic_stream(
    blocks: list[dict[str, Any]], *, usage: tuple[int, int] = (10, 5), pause: float = 0.0
) -> list[bytes | float]:
    """``blocks`` (``{"type": "text", "text"}`` or ``tool_use`` with ``input``) as SSE events;
    ``usage``: input and output tokens (``message_start``, ``message_delta``)."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = message([], model="claude-x", stop=None)  # type: ignore[arg-type]
    start["usage"] = {"input_tokens": usage[0], "output_tokens": 1}
    out: list[bytes | float] = [event("message_start", {"message": start})]
    paused = False
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            head = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(event("content_block_start", {"index": i, "content_block": head}))
        out.append(event("content_block_delta", {"index": i, "delta": delta}))
        out.append(event("content_block_stop", {"index": i}))
        if pause and not paused and block["type"] == "text":
            out.append(pause)
            paused = True
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    out.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage[1]},
            },
        )
    )
    out.append(event("message_stop", {}))
    return out


def responses_text_item(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_call_item(name: str, args: dict[str, Any], call_id: str, item_id: str) -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def response_body(output: list[dict[str, Any]], response_id: str = "resp_mock") -> dict:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": "gpt-4o",
        "output": output,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def responses_stream(
    output: list[dict[str, Any]], *, response_id: str = "resp_mock", pause: float = 0.0
) -> list[bytes | float]:
    """``output`` items (``responses_text_item``, ``responses_call_item``) as the events of a
    streamed response, ending with ``response.completed``."""
    response = response_body(output, response_id)
    events: list[tuple[str, dict[str, Any]] | float] = [
        ("response.created", {"response": {**response, "status": "in_progress", "output": []}}),
    ]
    paused = False
    for index, item in enumerate(output):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            where = {"output_index": index, "content_index": 0, "item_id": item["id"]}
            events.append(("response.output_text.delta", {**where, "delta": text}))
        else:
            where = {"output_index": index, "item_id": item["id"]}
            delta = {**where, "delta": item["arguments"]}
            events.append(("response.function_call_arguments.delta", delta))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
        if pause and not paused and item["type"] == "message":
            events.append(pause)
            paused = True
    events.append(("response.completed", {"response": response}))
    out: list[bytes | float] = []
    n = 0
    for entry in events:
        if isinstance(entry, float):
            out.append(entry)
            continue
        name, data = entry
        payload = json.dumps({"type": name, "sequence_number": n, **data})
        out.append(f"event: {name}\ndata: {payload}\n\n".encode())
        n += 1
    return out
