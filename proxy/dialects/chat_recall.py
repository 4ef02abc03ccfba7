"""The recall tool in chat completions' shape: a ``function`` tool in ``tools``, the
model's ``tool_calls`` read from ``choices[0].message`` or from the stream's deltas, and the
recall answered as ``tool`` messages after the assistant's call."""

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


def recall_parameters() -> dict[str, Any]:
    """The tool's JSON schema, the same in every dialect."""
    return {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The recall id, e.g. r3kq7d2mzp."},
            "query": {
                "type": "string",
                "description": "Optional: return only the lines containing this text, with a "
                "few lines around each.",
            },
        },
        "required": ["id"],
    }


def forbids_tools(tool_choice: object) -> bool:
    """``tool_choice: none`` (every OpenAI API; Anthropic's is ``{"type": "none"}``)."""
    if tool_choice == "none":
        return True
    return isinstance(tool_choice, Mapping) and tool_choice.get("type") == "none"


def declared_names(tools: object) -> set[str]:
    """The names of the tools a request declares, in any dialect's shape."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
        if isinstance(tool.get("name"), str):
            names.add(tool["name"])
    return names


def with_tool(body: dict[str, Any], name: str, tool: dict[str, Any]) -> dict[str, Any] | None:
    """``body`` with ``tool`` (named ``name``) after its own tools, or None when the client
    declared a tool of that name, its tool_choice forbids tools, or its ``tools`` is not a list
    (the provider's to refuse as it came: adding ours would make it a request never sent)."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return None
    if forbids_tools(body.get("tool_choice")) or name in declared_names(tools):
        return None
    return {**body, "tools": [*(tools or []), tool]}


class ChatRecall:
    call_marker = b'"tool_calls"'

    def offer(self, body: dict[str, Any], name: str, description: str) -> dict[str, Any] | None:
        function = {"name": name, "description": description, "parameters": recall_parameters()}
        return with_tool(body, name, {"type": "function", "function": function})

    def read(self, data: bytes) -> ModelReply | None:
        try:
            message = wirejson.loads_shallow(data)["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        if not isinstance(message, dict):
            return None
        return ModelReply(_calls(message.get("tool_calls")), (message,))

    def classify(self, event: Mapping[str, Any]) -> int:
        for choice in as_list(event.get("choices")):
            delta = as_mapping(as_mapping(choice).get("delta"))
            if delta.get("tool_calls"):
                return TOOL
            if delta.get("content") or delta.get("refusal"):
                return TEXT
        return UNDECIDED

    def read_stream(self, events: Sequence[Mapping[str, Any]]) -> ModelReply | None:
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        for event in events:
            for choice in as_list(event.get("choices")):
                delta = as_mapping(as_mapping(choice).get("delta"))
                if isinstance(delta.get("content"), str):
                    content.append(delta["content"])
                for part in map(as_mapping, as_list(delta.get("tool_calls"))):
                    index = part.get("index")
                    call = calls.setdefault(
                        index if isinstance(index, int) else 0,
                        {"id": "", "name": "", "arguments": ""},
                    )
                    function = as_mapping(part.get("function"))
                    call["id"] = _text(part.get("id")) or call["id"]
                    call["name"] += _text(function.get("name"))
                    call["arguments"] += _text(function.get("arguments"))
        tool_calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for _, c in sorted(calls.items())
        ]
        message = {
            "role": "assistant",
            "content": "".join(content) or None,
            "tool_calls": tool_calls,
        }
        return ModelReply(_calls(tool_calls), (message,))

    def ask_again(self, body: dict[str, Any], answered: Answered) -> dict[str, Any]:
        reply, answers, name = answered.reply, answered.answers, answered.name
        message = dict(reply.turn[0]) if reply.turn else {"role": "assistant", "content": None}
        message["tool_calls"] = [
            c
            for c in as_list(message.get("tool_calls"))
            if as_mapping(as_mapping(c).get("function")).get("name") == name
        ]
        results = [
            {"role": "tool", "tool_call_id": call_id, "content": text}
            for call_id, text in answers.items()
        ]
        again = {**body, "messages": [*body["messages"], message, *results]}
        if answered.last:
            again["tool_choice"] = "none"
        return again

    def splice(self, relayed: Sequence[Mapping[str, Any]]) -> ChatSplice:
        return ChatSplice(next((e["id"] for e in relayed if isinstance(e.get("id"), str)), None))

    def strip(self, name: str) -> ChatStrip:
        return ChatStrip(name)


class ChatSplice:
    """Chunks go on under the first answer's id; the new answer's opening chunk (its role) is
    dropped. Tool call indices need no shift: calls held back are never relayed."""

    def __init__(self, completion_id: str | None) -> None:
        self._id = completion_id

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        choices = as_list(event.get("choices"))
        if choices and not event.get("usage") and all(_opening(c) for c in choices):
            return None
        return {**event, "id": self._id} if self._id is not None else event


class ChatStrip:
    """A choice's calls of the tool are dropped (a streamed call is known by the name in its
    first delta), the others renumbered; ``finish_reason`` ``tool_calls`` becomes ``stop``
    when no call is left."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._dropped: set[tuple[object, int]] = set()  # (choice index, call index)
        self._kept: set[object] = set()  # choices with a call of the client's

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        choices = event.get("choices")
        if not isinstance(choices, list):
            return event
        return {**event, "choices": [self._choice(c, "delta") for c in choices]}

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        choices = body.get("choices")
        if not isinstance(choices, list):
            return body
        return {**body, "choices": [self._choice(c, "message") for c in choices]}

    def _choice(self, choice: object, key: str) -> object:
        if not isinstance(choice, Mapping):
            return choice
        out = dict(choice)
        at = choice.get("index", 0)
        part = choice.get(key)
        if isinstance(part, Mapping) and isinstance(part.get("tool_calls"), list):
            calls = [c for n, c in enumerate(part["tool_calls"]) if self._kept_call(at, n, c)]
            out[key] = {k: v for k, v in part.items() if k != "tool_calls"}
            if calls:
                out[key]["tool_calls"] = calls
        if choice.get("finish_reason") == "tool_calls" and at not in self._kept:
            out["finish_reason"] = "stop"
        return out

    def _kept_call(self, at: object, position: int, call: object) -> bool:
        """Whether a call (or a streamed call's delta) stays; renumbers it when it does."""
        if not isinstance(call, dict):
            return True
        index = call.get("index", position)
        index = index if isinstance(index, int) else position
        function = call.get("function")
        if isinstance(function, Mapping) and function.get("name") == self._name:
            self._dropped.add((at, index))
        if (at, index) in self._dropped:
            return False
        self._kept.add(at)
        if "index" in call:
            call["index"] = index - sum(1 for c, i in self._dropped if c == at and i < index)
        return True


def _opening(choice: object) -> bool:
    """A choice that says nothing yet: a role, empty content, no finish."""
    if not isinstance(choice, Mapping) or choice.get("finish_reason") is not None:
        return False
    delta = choice.get("delta") or {}
    return isinstance(delta, Mapping) and not any(
        value for key, value in delta.items() if key != "role"
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _calls(tool_calls: object) -> tuple[ToolCall, ...]:
    found = []
    for call in tool_calls if isinstance(tool_calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            found.append(
                ToolCall(
                    str(call.get("id") or ""),
                    str(function.get("name") or ""),
                    str(function.get("arguments") or ""),
                )
            )
    return tuple(found)


CHAT_RECALL = ChatRecall()
