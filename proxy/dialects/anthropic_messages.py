"""``POST /v1/messages``: Anthropic's Messages API, translated to the core's neutral model and back
(docs/dialects.md, "Anthropic Messages").

Wire shapes (Anthropic's API reference, the ``anthropic`` SDK's ``types``): a body holds
``system`` (a string or text blocks) and ``messages``, each ``{"role": "user" | "assistant" | "system",
"content": str | [block]}``. Blocks are ``text``, ``image``, ``document``, ``tool_use`` (assistant:
``id``, ``name``, ``input``), ``tool_result`` (user: ``tool_use_id``, ``content`` a string or
blocks, ``is_error``), ``thinking`` / ``redacted_thinking`` (signed: sent back exactly as they
came) and server-tool blocks; any block may carry a ``cache_control`` mark.

The neutral messages:

- each ``system`` text block is one system message (the preamble); a string system is one;
- a ``role: "system"`` message inside ``messages`` (models that take them; the SDK's
  ``MessageParam``: a string or blocks, text and the beta's tool changes) is one system message
  in its place, ``PINNED``: an instruction, never summarized, cleared or dropped;
- a user message holding ``tool_result`` blocks is one tool message per result
  (``tool_call_id`` = ``tool_use_id``), never a new interaction; text next to the results is
  counted with the last of them;
- any other user message is one user message; an assistant message is one assistant message
  whose ``tool_use`` blocks are its ``tool_calls`` (arguments: the input as JSON).

Each carries its wire message in ``_wire`` (the tool messages of one user message share it) and,
in ``_hash``, that wire message without its ``cache_control`` marks: clients such as Claude Code
move the marks every turn, and a hash that saw them would never match a checkpoint.

Rendering puts the summary (and any notice) into ``system`` as more text blocks after the
client's, and the kept wire messages back unchanged, but for the tool results the plan cleared;
a system message sent again after a cut goes to the first place the API accepts
(``proxy.dialects.anthropic_placement``).
The last injected block gets a cache breakpoint when the request has room for one
(``proxy.dialects.anthropic_cache``), so the compacted prefix is cached.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from proxy import wirejson
from proxy.core.facts import FactLookup
from proxy.core.messages import FAILED, content_text
from proxy.core.pins import PINNED
from proxy.core.plan import Plan
from proxy.core.resent import ParsedBody, parse_body
from proxy.dialects.anthropic_cache import with_injected_mark
from proxy.dialects.anthropic_native import ANTHROPIC_NATIVE
from proxy.dialects.anthropic_placement import placed
from proxy.dialects.anthropic_recall import ANTHROPIC_RECALL
from proxy.dialects.base import HASHED, WIRE, Neutral, wire_groups
from proxy.dialects.error_shapes import anthropic_error_body
from proxy.dialects.summary_calls import messages_answer_text, messages_summary_call
from proxy.errors import InvalidRequest, ProxyError
from proxy.types import (
    AnthropicBlock,
    AnthropicMessage,
    ChatMessage,
    ContentPart,
    FunctionTool,
    FunctionToolCall,
    TextPart,
    ToolCall,
)

_ROLES = ("user", "assistant", "system")
_CACHE_MARK = "cache_control"


def _invalid(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param, code="invalid_request")


def parse_messages_body(
    raw: bytes, last: ParsedBody | None = None, follow: bool = False
) -> ParsedBody:
    """Parse and check what the translation relies on; anything else is the provider's to judge.
    ``follow``: the messages it begins with of ``last``'s (the conversation's previous body,
    checked then) taken as parsed (``proxy.core.resent``), and only those after them checked."""
    parsed = parse_body(raw, "messages", last) if follow else ParsedBody(wirejson.parse(raw))
    body = parsed.value
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_type")
    if "model" in body and not isinstance(body["model"], str):
        raise _invalid("must be a string", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("is required and must be a non-empty array", "messages")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _check_blocks(system, "system", text_only=True)
    for i, message in enumerate(messages[parsed.reused :], parsed.reused):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise _invalid("must be an object", where)
        if message.get("role") not in _ROLES:
            raise _invalid("must be 'user', 'assistant' or 'system'", f"{where}.role")
        content = message.get("content")
        if not isinstance(content, str):
            _check_blocks(content, f"{where}.content")
    return parsed


def _check_blocks(blocks: object, where: str, *, text_only: bool = False) -> None:
    if not isinstance(blocks, list):
        raise _invalid("must be a string or an array of content blocks", where)
    for b, block in enumerate(blocks):
        field = f"{where}.{b}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _invalid("must be an object with a string type", field)
        kind = block["type"]
        if text_only and kind != "text":
            raise _invalid("must be a text block", field)
        if kind == "text" and not isinstance(block.get("text"), str):
            raise _invalid("must be a string", f"{field}.text")
        if kind in ("tool_use", "server_tool_use") and not isinstance(block.get("id"), str):
            raise _invalid("must be a string", f"{field}.id")
        if kind == "tool_use" and not isinstance(block.get("name"), str):
            raise _invalid("must be a string", f"{field}.name")
        if kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise _invalid("must be a string", f"{field}.tool_use_id")
            inner = block.get("content")
            if inner is not None and not isinstance(inner, str):
                _check_blocks(inner, f"{field}.content")


# --- wire -> neutral -----------------------------------------------------------------------------


def _unmarked(block: Any) -> Any:
    """A block without its cache mark (nested tool_result blocks too); the same object if none."""
    if not isinstance(block, dict):
        return block
    inner = block.get("content")
    if _CACHE_MARK not in block and not isinstance(inner, list):
        return block
    out = {k: v for k, v in block.items() if k != _CACHE_MARK}
    if block.get("type") == "tool_result" and isinstance(inner, list):
        out["content"] = [_unmarked(b) for b in inner]
    return out


def _hashed(message: AnthropicMessage) -> AnthropicMessage:
    """What of a wire message reaches the model: all of it but the cache marks."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [_unmarked(b) for b in content]}


def _part(block: AnthropicBlock) -> ContentPart | None:
    """A content block as a chat part, for counting and the summarizer's transcript."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "thinking":
        return {"type": "text", "text": str(block.get("thinking", ""))}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": ""}}
    if kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "text":
            return {"type": "text", "text": str(source.get("data", ""))}
        data = source.get("data", "") if isinstance(source, dict) else ""
        return {"type": "file", "file": {"file_data": str(data)}}
    if kind in ("tool_use", "tool_result", "redacted_thinking"):
        return None  # calls and results are their own fields; redacted thinking is opaque
    # Server tool blocks, search results and whatever comes next: counted as their JSON.
    return {"type": "text", "text": wirejson.encode(_unmarked(block)).decode()}


def _parts(content: object) -> str | list[ContentPart]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return _block_parts(content)


def _block_parts(blocks: list[AnthropicBlock]) -> list[ContentPart]:
    return [p for b in blocks if isinstance(b, dict) and (p := _part(b)) is not None]


def _tool_call(block: AnthropicBlock) -> FunctionToolCall:
    value: object = block.get("input", {})
    # The wire block goes out as it came; an input nested past what a JSON writer descends
    # is only not shown to the planner and the summarizer.
    if not wirejson.nests_within(value):
        value = "[input nested too deeply to show]"
    arguments = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def _neutral_messages(message: AnthropicMessage) -> list[ChatMessage]:
    wire: list[Any] = [message]
    hashed = _hashed(message)
    content = message["content"]
    if message["role"] == "system":  # an instruction among the turns: pinned, never summarized
        return [
            {"role": "system", "content": _parts(content), WIRE: wire, HASHED: hashed, PINNED: True}
        ]
    if message["role"] == "assistant":
        out: ChatMessage = {"role": "assistant", "content": _parts(content) or None}
        if isinstance(content, list):
            calls: list[ToolCall] = [_tool_call(b) for b in content if b.get("type") == "tool_use"]
            if calls:
                out["tool_calls"] = calls
        return [{**out, WIRE: wire, HASHED: hashed}]
    blocks = content if isinstance(content, list) else []
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if not results:
        return [{"role": "user", "content": _parts(content), WIRE: wire, HASHED: hashed}]
    tools = [_tool_result(b, wire, hashed) for b in results]
    extra = [b for b in blocks if b.get("type") != "tool_result"]
    if extra:  # text after the results: counted with the last one, never a new interaction
        last = tools[-1]
        own = last.get("content") or ""
        last["content"] = [
            *([TextPart(type="text", text=own)] if isinstance(own, str) else own),
            *_block_parts(extra),
        ]
    return tools


def _tool_result(block: AnthropicBlock, wire: list[Any], hashed: AnthropicMessage) -> ChatMessage:
    result: ChatMessage = {
        "role": "tool",
        "tool_call_id": block["tool_use_id"],
        "content": _parts(block.get("content", "")),
        WIRE: wire,
        HASHED: hashed,
    }
    if block.get("is_error") is True:
        result[FAILED] = True
    return result


def _system_messages(system: str | list[AnthropicBlock] | None) -> list[ChatMessage]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system, WIRE: [system]}]
    return [
        {"role": "system", "content": b["text"], WIRE: [b], HASHED: _unmarked(b)} for b in system
    ]


def _tools(tools: object) -> list[FunctionTool] | None:
    """Anthropic tool definitions in the chat shape the counter reads."""
    if not isinstance(tools, list):
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema"),
            },
        }
        for t in tools
        if isinstance(t, dict)
    ]


# --- neutral -> wire -----------------------------------------------------------------------------


def _is_turn(wire: list[Any]) -> bool:
    """The wire items are one message of ``messages`` (a system text block or string is not)."""
    return isinstance(wire[0], dict) and "role" in wire[0]


def _render_system(body: dict[str, Any], plan: Plan) -> tuple[bool, object]:
    """(present, value) of the ``system`` to send: the client's kept blocks, then what the plan
    injected (the summary, a notice) as text blocks; the client's string stays a string when
    nothing is added to it."""
    kept: list[Any] = []
    added: list[TextPart] = []  # an Anthropic text block has a chat text part's shape
    for message in plan.messages:
        if message.get("role") != "system":
            continue
        wire = message.get(WIRE)
        if wire is not None and _is_turn(wire):
            continue  # a system message inside ``messages`` stays there
        if wire is None:
            added.append({"type": "text", "text": content_text(message.get("content"))})
        else:
            kept.extend(wire)
    original = body.get("system")
    if not added:
        if isinstance(original, str) and kept == [original]:
            return True, original
        if not kept:
            return False, None
    blocks = [{"type": "text", "text": b} if isinstance(b, str) else b for b in kept]
    return True, blocks + added


def _injected(plan: Plan) -> bool:
    """Whether the plan put text of its own into ``system`` (a summary, a notice)."""
    return any(m.get("role") == "system" and m.get(WIRE) is None for m in plan.messages)


def _render_messages(plan: Plan) -> list[AnthropicMessage]:
    # (the wire message's list, tool_use_id) of every tool result the plan replaced by a stub
    cleared = {
        (id(plan.source[i][WIRE]), plan.source[i].get("tool_call_id", ""))
        for i in plan.cleared
        if plan.source[i].get(WIRE) is not None
    }
    out: list[AnthropicMessage] = []
    for wire, members in wire_groups(plan):
        if wire is None or not _is_turn(wire):
            continue  # the system prompt (and what the plan injected) is rendered on its own
        stubs = {
            m["tool_call_id"]: m["content"]
            for m in members
            if (id(wire), m.get("tool_call_id", "")) in cleared
        }
        for message in wire:
            out.append(_stubbed(message, stubs) if stubs else message)
    return placed(out)  # a pinned system message sent again goes where the API takes it


def _stubbed(message: AnthropicMessage, stubs: Mapping[str, Any]) -> AnthropicMessage:
    """``message`` with the content of the named tool results replaced by their stub; every
    other field of those blocks (cache mark, is_error) and every other block unchanged."""
    blocks = message["content"]
    if isinstance(blocks, str):  # no tool result to stub
        return message
    content: list[AnthropicBlock] = [
        {**b, "content": stubs[b["tool_use_id"]]}
        if b.get("type") == "tool_result" and b.get("tool_use_id") in stubs
        else b
        for b in blocks
    ]
    return {**message, "content": content}


class AnthropicMessages:
    """Translates Anthropic Messages bodies: ``system`` and content blocks to neutral messages
    and back."""

    name = "messages"
    history_field = "messages"
    cache_key_field = None  # Anthropic caches at cache_control breakpoints (see render)
    recall = ANTHROPIC_RECALL  # the recall tool in this dialect's shape
    records = False
    native = ANTHROPIC_NATIVE  # context_management.edits (strategy: native)

    def parse(self, raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
        return parse_messages_body(raw, last, follow)

    def conversation(
        self,
        body: dict[str, Any],
        *,
        facts: FactLookup | None = None,
        parsed: ParsedBody | None = None,
    ) -> Neutral:
        messages = _system_messages(body.get("system"))
        # A message's translation depends on it alone: those the last body made, taken.
        made = parsed.translated if parsed is not None else []
        for index, message in enumerate(body["messages"]):
            if index == len(made):
                made.append(_neutral_messages(message))
            messages.extend(made[index])
        return Neutral(messages, _tools(body.get("tools")))

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        out = {**body, "messages": _render_messages(plan)}
        present, system = _render_system(body, plan)
        if present:
            out["system"] = system
        else:
            out.pop("system", None)
        if _injected(plan):
            return with_injected_mark(out)  # the compacted prefix ends with what was injected
        return out

    def summary_call(
        self, sent: dict[str, Any], instruction: str, max_tokens: int
    ) -> dict[str, Any]:
        return messages_summary_call(sent, instruction, max_tokens)

    def answer_text(self, answer: dict[str, Any]) -> str | None:
        return messages_answer_text(answer)

    def error_body(self, error: ProxyError) -> bytes:
        return anthropic_error_body(error)


MESSAGES = AnthropicMessages()
