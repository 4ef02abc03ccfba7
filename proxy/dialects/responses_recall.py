"""The recall tool in the Responses API's shape: a ``function`` tool (flat: name,
description, parameters), the model's ``function_call`` output items read from the response or
from the stream's ``response.completed`` event, and the recall answered as
``function_call_output`` input items after the call."""

from __future__ import annotations

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
    as_list,
    as_mapping,
)
from proxy.dialects.chat_recall import recall_parameters, with_tool
from proxy.types import ResponsesItem


class ResponsesRecall:
    call_marker = b"response.output_item.added"

    def offer(self, body: dict[str, Any], name: str, description: str) -> dict[str, Any] | None:
        tool = {"name": name, "description": description, "parameters": recall_parameters()}
        return with_tool(body, name, {"type": "function", **tool})

    def read(self, data: bytes) -> ModelReply | None:
        try:
            output = wirejson.loads_shallow(data)["output"]
        except (ValueError, KeyError, TypeError):
            return None
        return _reply(output) if isinstance(output, list) else None

    def classify(self, event: Mapping[str, Any]) -> int:
        kind = event.get("type")
        if kind == "response.output_item.added":
            item = as_mapping(event.get("item")).get("type")
            if item == "message":
                return TEXT
            return TOOL if item == "function_call" else UNDECIDED
        return TEXT if kind == "response.output_text.delta" else UNDECIDED

    def read_stream(self, events: Sequence[Mapping[str, Any]]) -> ModelReply | None:
        for event in reversed(events):
            if event.get("type") == "response.completed":
                output = as_mapping(event.get("response")).get("output")
                return _reply(output) if isinstance(output, list) else None
        return None

    def ask_again(self, body: dict[str, Any], answered: Answered) -> dict[str, Any]:
        reply, answers, name = answered.reply, answered.answers, answered.name
        given = body.get("input")
        items = (
            [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
        )
        # Reasoning and what the model said stay with the calls they led to; the client's own
        # calls go. A message goes back by its text: an output item's id is only found again
        # by the provider when it stored the response.
        turn = [
            _said(i) if i.get("type") == "message" else i
            for i in reply.turn
            if isinstance(i, Mapping)
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

    def splice(self, relayed: Sequence[Mapping[str, Any]]) -> ResponsesSplice:
        return ResponsesSplice(relayed)

    def strip(self, name: str) -> ResponsesStrip:
        return ResponsesStrip(name)


_OPENING = frozenset({"response.created", "response.queued", "response.in_progress"})


class ResponsesSplice:
    """The new answer's output items follow those the client has (``output_index`` shifted),
    its events are numbered on from the last ``sequence_number`` relayed, its opening events
    are dropped, and its final response (``response.completed``, ``.incomplete``, ``.failed``)
    lists every item the client got under the id the stream opened with: the SDKs check that
    a stream's response keeps its id."""

    def __init__(self, relayed: Sequence[Mapping[str, Any]]) -> None:
        self._offset = sum(1 for e in relayed if e.get("type") == "response.output_item.added")
        self._items = [
            e["item"]
            for e in relayed
            if e.get("type") == "response.output_item.done" and "item" in e
        ]
        numbers = [
            e["sequence_number"] for e in relayed if isinstance(e.get("sequence_number"), int)
        ]
        self._number = max(numbers, default=-1)
        opened = next((e.get("response") for e in relayed if _opening(e)), None)
        self._id = opened.get("id") if isinstance(opened, Mapping) else None

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        if _opening(event):
            return None
        out = dict(event)
        if isinstance(out.get("output_index"), int):
            out["output_index"] += self._offset
        if isinstance(out.get("sequence_number"), int):
            self._number += 1
            out["sequence_number"] = self._number
        response = out.get("response")
        if isinstance(response, Mapping):
            whole = {**response, "output": [*self._items, *as_list(response.get("output"))]}
            if self._id is not None:
                whole["id"] = self._id
            out["response"] = whole
        return out


def _opening(event: Mapping[str, Any]) -> bool:
    kind = event.get("type")
    return isinstance(kind, str) and kind in _OPENING


class ResponsesStrip:
    """The tool's ``function_call`` items are dropped (streamed: every event of their
    ``output_index``, known from ``response.output_item.added``), the later items renumbered,
    the events' ``sequence_number`` kept without gaps, and the final response's ``output``
    listed without them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._dropped: set[int] = set()
        self._skipped = 0  # events dropped: later sequence numbers move down by as many

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        index = event.get("output_index")
        item = event.get("item")
        added = event.get("type") == "response.output_item.added"
        if added and isinstance(index, int) and isinstance(item, Mapping) and not self._keeps(item):
            self._dropped.add(index)
        if index in self._dropped:
            self._skipped += 1
            return None
        out = dict(event)
        if isinstance(index, int):
            out["output_index"] = index - sum(1 for i in self._dropped if i < index)
        if isinstance(out.get("sequence_number"), int):
            out["sequence_number"] -= self._skipped
        response = out.get("response")
        if isinstance(response, dict):
            out["response"] = self.whole(response)
        return out

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        output = body.get("output")
        if not isinstance(output, list):
            return body
        return {
            **body,
            "output": [i for i in output if not isinstance(i, Mapping) or self._keeps(i)],
        }

    def _keeps(self, item: Mapping[str, Any]) -> bool:
        return item.get("type") != "function_call" or item.get("name") != self._name


def _said(item: Mapping[str, Any]) -> ResponsesItem:  # an output message, as sent back
    parts = item.get("content")
    parts = parts if isinstance(parts, list) else []
    text = "".join(
        str(p.get("text") or p.get("refusal") or "") for p in parts if isinstance(p, Mapping)
    )
    return {"role": "assistant", "content": text}


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
