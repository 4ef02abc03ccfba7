"""The recall tool in Anthropic Messages' shape: a tool with an ``input_schema``, the
model's ``tool_use`` blocks read from the message or from the stream's ``content_block_*``
events, and the recall answered as ``tool_result`` blocks in a user message."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy import wirejson
from proxy.compaction.dialect.recall import (
    TEXT,
    TOOL,
    UNDECIDED,
    Answered,
    ModelReply,
    ToolCall,
    as_mapping,
)
from proxy.dialects.chat_recall import recall_parameters, with_tool


class AnthropicRecall:
    call_marker = b"content_block_start"

    def offer(self, body: dict[str, Any], name: str, description: str) -> dict[str, Any] | None:
        tool = {"name": name, "description": description, "input_schema": recall_parameters()}
        return with_tool(body, name, tool)

    def read(self, data: bytes) -> ModelReply | None:
        try:
            content = wirejson.loads_shallow(data)["content"]
        except (ValueError, KeyError, TypeError):
            return None
        return _reply(content) if isinstance(content, list) else None

    def classify(self, event: Mapping[str, Any]) -> int:
        if event.get("type") != "content_block_start":
            return UNDECIDED
        kind = as_mapping(event.get("content_block")).get("type")
        if kind == "text":
            return TEXT
        return TOOL if kind in ("tool_use", "server_tool_use") else UNDECIDED

    def read_stream(self, events: Sequence[Mapping[str, Any]]) -> ModelReply | None:
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        for event in events:
            index = event.get("index")
            if event.get("type") == "content_block_start" and isinstance(index, int):
                blocks[index] = dict(as_mapping(event.get("content_block")))
            elif event.get("type") == "content_block_delta" and index in blocks:
                delta = as_mapping(event.get("delta"))
                kind = delta.get("type")
                block = blocks[index]
                if kind == "input_json_delta":
                    partial[index] = partial.get(index, "") + str(delta.get("partial_json") or "")
                elif kind == "text_delta":
                    block["text"] = block.get("text", "") + str(delta.get("text") or "")
                elif kind == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + str(delta.get("thinking") or "")
                elif kind == "signature_delta":
                    block["signature"] = str(delta.get("signature") or "")
        for index, text in partial.items():
            try:
                # Bounded before it is parsed: a model may write input nested a thousand deep.
                blocks[index]["input"] = wirejson.loads_shallow(text) if text else {}
            except ValueError:
                blocks[index]["input"] = {}
        return _reply([blocks[i] for i in sorted(blocks)])

    def ask_again(self, body: dict[str, Any], answered: Answered) -> dict[str, Any]:
        reply, answers, name = answered.reply, answered.answers, answered.name
        # Thinking and text stay with the calls they led to; the client's own calls go (the
        # model makes them again once it has what it recalled).
        turn = [
            b
            for b in reply.turn
            if isinstance(b, Mapping) and (b.get("type") != "tool_use" or b.get("name") == name)
        ]
        results = [
            {"type": "tool_result", "tool_use_id": call_id, "content": text}
            for call_id, text in answers.items()
        ]
        messages = [
            *body["messages"],
            {"role": "assistant", "content": turn},
            {"role": "user", "content": results},
        ]
        again = {**body, "messages": messages}
        if answered.last:
            again["tool_choice"] = {"type": "none"}
        return again

    def splice(self, relayed: Sequence[Mapping[str, Any]]) -> AnthropicSplice:
        return AnthropicSplice(sum(1 for e in relayed if e.get("type") == "content_block_start"))

    def strip(self, name: str) -> AnthropicStrip:
        return AnthropicStrip(name)


_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})


class AnthropicSplice:
    """The new answer's content blocks follow those the client has (their ``index`` shifted);
    its ``message_start`` is dropped and its usage moved to the ``message_delta``, where the
    SDKs take a count present as the message's total (the one the client had came from the
    first answer's ``message_start``)."""

    def __init__(self, blocks_relayed: int) -> None:
        self._offset = blocks_relayed
        self._start_usage: dict[str, Any] = {}

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        kind = event.get("type")
        if kind == "message_start":
            usage = as_mapping(event.get("message")).get("usage")
            self._start_usage = dict(usage) if isinstance(usage, Mapping) else {}
            return None
        if isinstance(kind, str) and kind in _BLOCK_EVENTS and isinstance(event.get("index"), int):
            return {**event, "index": event["index"] + self._offset}
        if kind == "message_delta":
            usage = event.get("usage")
            return {**event, "usage": {**self._start_usage, **as_mapping(usage)}}
        return event


class AnthropicStrip:
    """The tool's ``tool_use`` blocks are dropped (a streamed one by its index, known from its
    ``content_block_start``), the later blocks renumbered; ``stop_reason`` ``tool_use``
    becomes ``end_turn`` when no ``tool_use`` of the client's is left."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._dropped: set[int] = set()
        self._kept = False  # a tool_use of the client's is left

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        kind = event.get("type")
        index = event.get("index")
        if kind in _BLOCK_EVENTS and isinstance(index, int):
            block = event.get("content_block")
            opens = kind == "content_block_start"
            if opens and isinstance(block, Mapping) and not self._keeps(block):
                self._dropped.add(index)
            if index in self._dropped:
                return None
            return {**event, "index": index - sum(1 for i in self._dropped if i < index)}
        delta = event.get("delta")
        if kind == "message_delta" and isinstance(delta, Mapping):
            return {**event, "delta": self._stopped(delta)}
        return event

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        content = body.get("content")
        if not isinstance(content, list):
            return body
        kept = [b for b in content if not isinstance(b, Mapping) or self._keeps(b)]
        return self._stopped({**body, "content": kept})

    def _keeps(self, block: Mapping[str, Any]) -> bool:
        if block.get("type") != "tool_use":
            return True
        if block.get("name") == self._name:
            return False
        self._kept = True
        return True

    def _stopped(self, holder: Mapping[str, Any]) -> dict[str, Any]:
        if holder.get("stop_reason") == "tool_use" and not self._kept:
            return {**holder, "stop_reason": "end_turn"}
        return dict(holder)


def _reply(content: list[Any]) -> ModelReply:
    calls = tuple(
        ToolCall(str(b.get("id") or ""), str(b.get("name") or ""), json.dumps(b.get("input") or {}))
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    )
    return ModelReply(calls, tuple(content))


ANTHROPIC_RECALL = AnthropicRecall()
