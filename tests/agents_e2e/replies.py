"""The strict provider's answers in each dialect, whole or streamed as the real APIs stream
them: Anthropic Messages (signed thinking, tool_use), chat completions (tool_calls deltas),
Responses (encrypted reasoning items, function calls). ``usage`` carries a plausible input
token count (a quarter of the request's bytes) so the proxy's calibration sees sane figures.
"""

from __future__ import annotations

import json
from typing import Any

from tests.agents_e2e.rules import REASONED, encrypt, seal
from tests.agents_e2e.script import Action
from tests.support.anthropic_provider import message
from tests.support.mock_upstream import Reply, chunk_event, completion, json_reply, sse_reply


def _sse(name: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic(
    action: Action, n: int, *, model: str, thinking: bool, stream: bool, tokens: int
) -> Reply:
    content: list[dict[str, Any]] = []
    if thinking:
        text = f"Step {action.step or n}: decide what to run next."
        content.append({"type": "thinking", "thinking": text, "signature": seal(text)})
    if action.name:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_e2e_{n}",
                "name": action.name,
                "input": action.arguments,
            }
        )
    else:
        content.append({"type": "text", "text": action.text})
    stop = "tool_use" if action.name else "end_turn"
    usage = {"input_tokens": tokens, "output_tokens": 40}
    whole = {**message(content, model=model, stop=stop, usage=usage), "id": f"msg_e2e_{n}"}
    if not stream:  # each reply its own id: Claude Code merges blocks that share one
        return json_reply(whole)
    start = {**whole, "content": [], "usage": {"input_tokens": tokens, "output_tokens": 1}}
    start["stop_reason"] = None
    events = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(content):
        kind = block["type"]
        head = {
            "thinking": {**block, "thinking": "", "signature": ""},
            "text": {"type": "text", "text": ""},
        }.get(kind, {**block, "input": {}})
        deltas = {
            "thinking": [
                {"type": "thinking_delta", "thinking": block.get("thinking")},
                {"type": "signature_delta", "signature": block.get("signature")},
            ],
            "text": [{"type": "text_delta", "text": block.get("text")}],
        }.get(kind, [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input"))}])
        events.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": head},
            )
        )
        for delta in deltas:
            events.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": 40},
    }
    events += [_sse("message_delta", end), _sse("message_stop", {"type": "message_stop"})]
    return sse_reply(list(events))


def chat(action: Action, n: int, *, model: str, stream: bool, tokens: int) -> Reply:
    calls = []
    if action.name:
        function = {"name": action.name, "arguments": json.dumps(action.arguments)}
        calls = [{"id": f"call_e2e_{n}", "type": "function", "function": function}]
    usage = {"prompt_tokens": tokens, "completion_tokens": 40, "total_tokens": tokens + 40}
    if not stream:
        body = completion(action.text or None, model=model, tool_calls=calls or None)  # type: ignore[arg-type]
        body.update(usage=usage, id=f"chatcmpl-e2e-{n}")
        return json_reply(body)
    chunks: list[bytes | float] = [chunk_event({"role": "assistant", "content": ""}, model=model)]
    if action.text:
        chunks.append(chunk_event({"content": action.text}, model=model))
    for i, call in enumerate(calls):
        head = {
            "index": i,
            "id": call["id"],
            "type": "function",
            "function": {"name": action.name, "arguments": ""},
        }
        chunks.append(chunk_event({"tool_calls": [head]}, model=model))
        piece = {"index": i, "function": {"arguments": call["function"]["arguments"]}}
        chunks.append(chunk_event({"tool_calls": [piece]}, model=model))
    chunks.append(chunk_event({}, "tool_calls" if calls else "stop", model=model))
    final = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    chunks += [f"data: {json.dumps(final)}\n\n".encode(), b"data: [DONE]\n\n"]
    return sse_reply(chunks)


def responses(
    action: Action, n: int, *, model: str, reasoning: bool, stream: bool, tokens: int
) -> Reply:
    output: list[dict[str, Any]] = []
    if reasoning:
        summary = [{"type": "summary_text", "text": f"Step {action.step or n}: pick the command."}]
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_e2e_{n}",
                "summary": summary,
                "encrypted_content": encrypt({"n": n}),
            }
        )
    if action.name:
        prefix = REASONED if reasoning else "fc_"
        output.append(
            {
                "type": "function_call",
                "id": f"{prefix}e2e_{n}",
                "call_id": f"call_e2e_{n}",
                "name": action.name,
                "arguments": json.dumps(action.arguments),
                "status": "completed",
            }
        )
    else:
        part = {"type": "output_text", "text": action.text, "annotations": []}
        output.append(
            {
                "type": "message",
                "id": f"msg_e2e_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    usage = {
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": tokens + 40,
    }
    response = {
        "id": f"resp_e2e_{n}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": model,
        "output": output,
        "usage": usage,
    }
    if not stream:
        return json_reply(response)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**response, "status": "in_progress", "output": []}}),
    ]
    for index, item in enumerate(output):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        where = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "function_call":
            events.append(
                ("response.function_call_arguments.delta", {**where, "delta": item["arguments"]})
            )
            events.append(
                ("response.function_call_arguments.done", {**where, "arguments": item["arguments"]})
            )
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(
                ("response.output_text.delta", {**where, "content_index": 0, "delta": text})
            )
            events.append(
                ("response.output_text.done", {**where, "content_index": 0, "text": text})
            )
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": response}))
    return sse_reply(
        [
            _sse(name, {"type": name, "sequence_number": i, **data})
            for i, (name, data) in enumerate(events)
        ]
    )
