"""``POST /v1/responses`` (OpenAI's Responses API): ``input`` items <-> the neutral model.

A stateless Responses client (the OpenAI Agents SDK, Codex-style agents with ``store: false``)
sends the whole history as ``input``: a flat list of items. They become neutral messages
(docs/dialects.md, "Responses API"):

- ``instructions`` is a system message at the head of the preamble whose ``_wire`` is empty: it
  is counted and hashed, and rendering leaves the field where it is, never adding it as an item.
- A ``message`` item of role user, system or developer is one neutral message of that role.
- Everything a model turn produced (assistant ``message`` items, ``reasoning`` items, tool
  calls, hosted tool items such as ``web_search_call``, anything unknown) up to the next message
  of another role or tool output is ONE assistant message; its calls are its ``tool_calls``
  (ids: ``call_id``). A round is kept or dropped whole, reasoning items included, never altered.
- A tool output (``function_call_output`` and its kin) is a tool message answering its call.
- A ``compaction`` item (the provider's own encrypted summary) is a developer message: at the
  head of ``input`` it is preamble and always kept.

Each neutral message carries ``_wire`` (its items, put back unchanged) and ``_hash`` (the same
items, hashed into the checkpoint chain). Nothing is copied: a plan that changes nothing sends
the client's bytes.

With ``previous_response_id`` or ``conversation`` the provider holds the history, and a string
``input`` is one user message with nothing to cut: those requests pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import wirejson
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.resent import ParsedBody, parse_body
from proxy.dialects.base import HASHED, WIRE, Neutral, cleared_wires, wire_groups
from proxy.dialects.error_shapes import openai_error_body
from proxy.dialects.responses_native import RESPONSES_NATIVE
from proxy.dialects.responses_recall import RESPONSES_RECALL
from proxy.errors import InvalidRequest, ProxyError
from proxy.types import (
    ChatMessage,
    ContentPart,
    FileData,
    FunctionCall,
    FunctionToolCall,
    TextPart,
    ToolCall,
)

_MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})

# Items the model emits that a later output item answers, and the field naming the call
# (openai-python, src/openai/types/responses/response_input_item_param.py).
_CALLS = {
    "function_call": "call_id",
    "custom_tool_call": "call_id",
    "computer_call": "call_id",
    "local_shell_call": "call_id",
    "shell_call": "call_id",
    "apply_patch_call": "call_id",
    "tool_search_call": "call_id",
    "mcp_approval_request": "id",
}
# Items the client sends back with a call's result, and the field naming the call they answer.
# ``local_shell_call_output`` names it by ``id``: the call's item id, mapped to its call_id.
_OUTPUTS = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "tool_search_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}
# The outputs of function and custom tools: always linked by call_id, their output text or parts.
_LINKED_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
# Outputs whose ``output`` is the model-visible text a cleared result's stub replaces (the
# others, a screenshot or a list of shell results, are sent as they came).
_STUBBABLE = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
_COMPACTION_TEXT = "[compaction: earlier turns, summarized by the provider]"
# Calls that are chat tool calls of their own, and their payload field (``_typed_call``).
_TYPED_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
# Fields of a call item that are not what it asks for (read as its arguments otherwise).
_CALL_META = frozenset({"type", "id", "call_id", "status", "name", "caller"})


def _typed_call(kind: str, call_id: str, name: str, payload: str) -> ToolCall:
    """A function_call or custom_tool_call item (its fields checked) as the neutral call:
    ``payload`` is its arguments (JSON text) or its free-text input."""
    if kind == "custom_tool_call":
        return {"id": call_id, "type": "custom", "custom": {"name": name, "input": payload}}
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": payload}}


def parse_responses_body(
    raw: bytes, last: ParsedBody | None = None, follow: bool = False
) -> ParsedBody:
    """Parse and check the parts every Responses request needs; items are checked only when the
    request is compacted (``conversation``). ``follow``: the items it begins with of ``last``'s
    (the conversation's previous body) taken as parsed (``proxy.core.resent``)."""
    parsed = parse_body(raw, "input", last) if follow else ParsedBody(wirejson.parse(raw))
    body = parsed.value
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_type")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidRequest("'model' must be a string", param="model", code="invalid_type")
    if body.get("input") is not None and not isinstance(body["input"], str | list):
        raise InvalidRequest(
            "'input' must be a string or an array of items", param="input", code="invalid_type"
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest(
            "'instructions' must be a string", param="instructions", code="invalid_type"
        )
    return parsed


@dataclass(frozen=True, slots=True)
class _Turn:
    """The assistant message being built, with its lists as the builder fills them."""

    message: ChatMessage
    content: list[ContentPart]
    calls: list[ToolCall]
    wire: list[Any]  # the items as the client sent them: any JSON


class _Builder:
    """Walks ``input`` once, building the neutral messages (see the module docstring).

    The items are the request's JSON as it came in (``dict[str, Any]``): this is the edge
    where each field is checked before it is read, some by a name chosen per kind, so they are
    not typed as ``ResponsesItem`` here."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.turn: _Turn | None = None  # the assistant message being built
        self.call_ids: dict[str, str] = {}  # a call's item id -> its call id

    def add(self, index: int, item: object) -> None:
        if not isinstance(item, dict):
            raise _invalid(index, "", "must be an object")
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            raise _invalid(index, "type", "must be a string")
        if kind == "message" or (kind is None and "role" in item):
            self._message(index, item)
        elif kind == "compaction":
            # The provider's own summary of earlier turns (``/v1/responses/compact``), encrypted:
            # a developer message, so at the head of the input it is preamble, always kept.
            self.turn = None
            self.messages.append(_neutral("developer", _COMPACTION_TEXT, [item]))
        elif kind in _OUTPUTS and isinstance(item.get(_OUTPUTS[kind]), str):
            self._output(index, item, kind)
        elif kind in _LINKED_OUTPUTS:
            raise _invalid(index, "call_id", "must be a string")
        else:
            self._model_item(index, item, kind)

    def _message(self, index: int, item: dict[str, Any]) -> None:
        role = item.get("role")
        if not isinstance(role, str) or role not in _MESSAGE_ROLES:
            raise _invalid(index, "role", f"must be one of {', '.join(sorted(_MESSAGE_ROLES))}")
        content = _check_content(index, item.get("content"))
        if role == "assistant":
            turn = self._open_turn()
            turn.wire.append(item)
            turn.content.extend(content if isinstance(content, list) else [_text(content)])
            return
        self.turn = None
        texts = _all_text(content) if isinstance(content, list) else None
        if role != "user" and texts is not None:
            # System text as a string: how a summary echoed back is recognised and stripped.
            content = "\n".join(texts)
        self.messages.append(_neutral(role, content, [item]))

    def _output(self, index: int, item: dict[str, Any], kind: str) -> None:
        self.turn = None
        if kind in _LINKED_OUTPUTS:
            output = item.get("output")
            if not isinstance(output, str | list):
                raise _invalid(index, "output", "must be a string or an array")
        key = item[_OUTPUTS[kind]]
        message = _neutral("tool", _output_content(item.get("output")), [item])
        if kind == "local_shell_call_output":
            key = self.call_ids.get(key, key)
        message["tool_call_id"] = key
        self.messages.append(message)

    def _model_item(self, index: int, item: dict[str, Any], kind: str | None) -> None:
        turn = self._open_turn()
        turn.wire.append(item)
        if kind in _TYPED_CALLS:
            for field in ("call_id", "name", _TYPED_CALLS[kind]):
                if not isinstance(item.get(field), str):
                    raise _invalid(index, field, "must be a string")
            payload = item[_TYPED_CALLS[kind]]
            turn.calls.append(_typed_call(kind, item["call_id"], item["name"], payload))
        elif kind in _CALLS and isinstance(item.get(_CALLS[kind]), str):
            call_id = item[_CALLS[kind]]
            if kind == "local_shell_call" and isinstance(item.get("id"), str):
                self.call_ids[item["id"]] = call_id
            asks = {k: v for k, v in item.items() if k not in _CALL_META}
            call: FunctionCall = {"name": str(item.get("name", kind)), "arguments": _json(asks)}
            shell: FunctionToolCall = {"id": call_id, "type": "function", "function": call}
            turn.calls.append(shell)
        elif kind == "reasoning":
            # Its summary and its plain text (open-weight models send it back) are what of it
            # is readable: counted, and in the summarizer's transcript marked as reasoning, not
            # as something the assistant said. Encrypted content is neither.
            for field in ("summary", "content"):
                parts = item.get(field)
                for part in parts if isinstance(parts, list) else ():
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        turn.content.append(_text(f"[reasoning] {part['text']}"))
        else:
            # A hosted tool's item (web_search_call, mcp_call, ...) or one this proxy does not
            # know: named in the transcript where it happened, sent as it came.
            turn.content.append(_text(f"[{kind or 'item_reference'}]"))

    def _open_turn(self) -> _Turn:
        if self.turn is None:
            content: list[ContentPart] = []
            calls: list[ToolCall] = []
            wire: list[Any] = []
            message = _neutral("assistant", content, wire)
            message["tool_calls"] = calls
            self.turn = _Turn(message, content, calls, wire)
            self.messages.append(message)
        return self.turn

    def finish(self) -> list[ChatMessage]:
        for message in self.messages:
            if message.get("role") == "assistant":
                if not message.get("tool_calls"):
                    message.pop("tool_calls", None)
                if not message.get("content"):
                    message["content"] = None
        return self.messages


def _neutral(role: str, content: str | list[ContentPart], wire: list[Any]) -> ChatMessage:
    return {"role": role, "content": content, WIRE: wire, HASHED: wire}


def _invalid(index: int, field: str, problem: str) -> InvalidRequest:
    where = f"input[{index}].{field}" if field else f"input[{index}]"
    return InvalidRequest(f"{where}: {problem}", param=where, code="invalid_input_item")


def _check_content(index: int, content: object) -> str | list[ContentPart]:
    """A message's content as neutral content: the string, or its parts as chat parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _invalid(index, "content", "must be a string or an array of parts")
    parts: list[ContentPart] = []
    for p, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _invalid(index, f"content[{p}]", "must be an object with a string type")
        parts.append(_part(part))
    return parts


def _part(part: dict[str, Any]) -> ContentPart:
    """One content part as the chat part the core counts and the summarizer reads."""
    kind = part["type"]
    if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind in ("input_image", "computer_screenshot"):
        detail = part.get("detail")
        return {"type": "image_url", "image_url": {"url": part.get("image_url"), "detail": detail}}
    if kind == "input_file":
        file: FileData = {
            "file_data": part.get("file_data") or "",
            "filename": part.get("filename") or "",
        }
        return {"type": "file", "file": file}
    return {"type": kind}


def _all_text(parts: list[ContentPart]) -> list[str] | None:
    """The parts' texts when every part is text; None when one is not."""
    texts = [t for p in parts if p["type"] == "text" and isinstance(t := p.get("text"), str)]
    return texts if len(texts) == len(parts) else None


def _text(text: str) -> TextPart:
    return {"type": "text", "text": text}


def _output_content(output: object) -> str | list[ContentPart]:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return [
            _part(p) if isinstance(p.get("type"), str) else _text(_json(p))
            for p in output
            if isinstance(p, dict)
        ]
    if isinstance(output, dict) and isinstance(output.get("type"), str):
        return [_part(output)]
    return "" if output is None else _json(output)


def _json(value: object) -> str:
    return wirejson.encode(value).decode("utf-8", "replace")


class Responses:
    """Translates Responses API bodies: ``input`` items to neutral messages and back."""

    name = "responses"
    history_field = "input"
    cache_key_field = "prompt_cache_key"
    recall = RESPONSES_RECALL  # the recall tool in this dialect's shape
    records = False
    native = RESPONSES_NATIVE  # context_management compaction (strategy: native)

    def parse(self, raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
        return parse_responses_body(raw, last, follow)

    def conversation(
        self,
        body: dict[str, Any],
        *,
        facts: FactLookup | None = None,
        parsed: ParsedBody | None = None,
    ) -> Neutral | None:
        items = body.get("input")
        if body.get("previous_response_id") is not None or body.get("conversation") is not None:
            return None  # the provider holds the history
        if not isinstance(items, list) or not items:
            return None  # a string is one user message: nothing to cut, sent as it came
        builder = _Builder()
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            # Counted and hashed as the preamble's head; its empty _wire renders as no item.
            builder.messages.append({"role": "system", "content": instructions, WIRE: []})
        for index, item in enumerate(items):
            builder.add(index, item)
        return Neutral(builder.finish(), body.get("tools"))

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        cleared = cleared_wires(plan)
        items: list[Any] = []
        for wire, members in wire_groups(plan):
            if wire is None:  # the summary (or a notice) the planner put in
                items += [
                    {"type": "message", "role": m["role"], "content": m["content"]} for m in members
                ]
            elif id(wire) in cleared:
                stub = members[0]["content"]
                items += [
                    {**item, "output": stub} if item.get("type") in _STUBBABLE else item
                    for item in wire
                ]
            else:
                items += wire
        return {**body, "input": items}

    def summary_call(
        self, sent: dict[str, Any], instruction: str, max_tokens: int
    ) -> dict[str, Any] | None:
        return None  # quoted by the summarizer (proxy.dialects.summary_calls)

    def answer_text(self, answer: dict[str, Any]) -> str | None:
        return None

    def error_body(self, error: ProxyError) -> bytes:
        return openai_error_body(error)


RESPONSES = Responses()
