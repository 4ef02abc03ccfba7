"""The recall tool in the Responses API's shape (issue 20): a ``function`` tool (flat: name,
description, parameters), the model's ``function_call`` output items read from the response or
from the stream's ``response.completed`` event, and the recall answered as
``function_call_output`` input items after the call."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.compaction.recall_contract import TEXT, TOOL, UNDECIDED, Answered, ModelReply, ToolCall
from proxy.dialects.chat_recall import recall_parameters, with_tool


class ResponsesRecall:
    def offer(self, body: dict[str, Any], name: str, description: str) -> dict[str, Any] | None:
        tool = {"name": name, "description": description, "parameters": recall_parameters()}
        return with_tool(body, name, {"type": "function", **tool})

    def read(self, data: bytes) -> ModelReply | None:
        try:
            output = json.loads(data)["output"]
        except (ValueError, KeyError, TypeError):
            return None
        return _reply(output) if isinstance(output, list) else None

    def classify(self, event: Mapping[str, Any]) -> int:
        kind = event.get("type")
        if kind == "response.output_item.added":
            item = (event.get("item") or {}).get("type")
            if item == "message":
                return TEXT
            return TOOL if item == "function_call" else UNDECIDED
        return TEXT if kind == "response.output_text.delta" else UNDECIDED

    def read_stream(self, events: Sequence[Mapping[str, Any]]) -> ModelReply | None:
        for event in reversed(events):
            if event.get("type") == "response.completed":
                output = (event.get("response") or {}).get("output")
                return _reply(output) if isinstance(output, list) else None
        return None

    def ask_again(self, body: dict[str, Any], answered: Answered) -> dict[str, Any]:
        reply, answers, name = answered.reply, answered.answers, answered.name
        given = body.get("input")
        items = (
            [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
        )
        # Reasoning stays with the calls it led to; the client's own calls go.
        turn = [
            i
            for i in reply.turn
            if isinstance(i, Mapping)
            and i.get("type") != "message"
            and (i.get("type") != "function_call" or i.get("name") == name)
        ]
        results = [
            {"type": "function_call_output", "call_id": call_id, "output": text}
            for call_id, text in answers.items()
        ]
        again = {**body, "input": [*items, *turn, *results]}
        if answered.last:
            again["tool_choice"] = "none"
        return again


def _reply(output: list[Any]) -> ModelReply:
    calls = tuple(
        ToolCall(
            str(i.get("call_id") or ""), str(i.get("name") or ""), str(i.get("arguments") or "")
        )
        for i in output
        if isinstance(i, Mapping) and i.get("type") == "function_call"
    )
    return ModelReply(calls, tuple(output))


RESPONSES_RECALL = ResponsesRecall()
