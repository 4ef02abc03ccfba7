"""The providers' own context management, played on top of the scripted providers.

``NativeProvider(mock)`` wraps whatever answers on ``mock`` (a ``ResponsesProvider`` or an
``AnthropicProvider``): a request without ``context_management`` goes to it unchanged; one with
the field is handled as the documented APIs handle it (openai-python 3.3.1 Responses types,
anthropic-sdk-python 0.121.0 beta types):

- Responses: ``context_management: [{"type": "compaction", "compact_threshold": N}]``; over N
  input tokens the answer's output starts with a ``compaction`` item (``encrypted_content``),
  streamed as its own ``response.output_item.added``/``done`` events.
- Messages: ``context_management.edits``, each edit refused without its ``anthropic-beta`` flag;
  ``clear_tool_uses_20250919`` over its trigger clears all but ``keep`` tool uses (its
  ``clear_at_least`` respected) and says so in ``context_management.applied_edits`` (in the
  message, or the stream's ``message_delta``); ``compact_20260112`` over its trigger puts a
  ``compaction`` block first and its tokens in ``usage.iterations``.

Like the real APIs it refuses what it does not know, naming it: an ``anthropic-beta`` flag
(``Unexpected value(s) ... for the anthropic-beta header``), an edit or entry ``type``.
``rejects=True`` plays a provider without these APIs: the field is an error in its own shape;
so does a request of an ``anthropic-version`` older than ``CURRENT_VERSION``.
Tokens are the mock's own estimate: a quarter of the JSON's length.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

from tests.support.anthropic_provider import error
from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply, sse_reply

CLEARING_BETA = "context-management-2025-06-27"
COMPACT_BETA = "compact-2026-01-12"
_EDIT_BETAS = {"clear_tool_uses_20250919": CLEARING_BETA, "compact_20260112": COMPACT_BETA}
CURRENT_VERSION = "2023-06-01"  # what the anthropic SDK sends
KNOWN_BETAS = {*_EDIT_BETAS.values(), "interleaved-thinking-2025-05-14"}


def tokens(value: object) -> int:
    return len(json.dumps(value)) // 4


class NativeProvider:
    def __init__(self, mock: MockUpstream, *, rejects: bool = False) -> None:
        self.inner = mock.default
        self.rejects = rejects
        self.refused = 0  # requests answered with an error about the field
        self._lock = threading.Lock()
        mock.default = self

    def __call__(self, request: Received) -> Reply:
        if request.method != "POST" or not request.path.endswith(("/responses", "/messages")):
            return self.inner(request)
        body = request.json()
        unknown = _unknown_betas(request) if request.path.endswith("/messages") else []
        if unknown:
            flags = ", ".join(f"`{f}`" for f in unknown)
            return error(f"Unexpected value(s) {flags} for the `anthropic-beta` header.")
        if "context_management" not in body:
            return self.inner(request)
        old = request.headers.get("anthropic-version", CURRENT_VERSION) < CURRENT_VERSION
        if self.rejects or old:
            with self._lock:
                self.refused += 1
            return self._refusal(request)
        plain = {k: v for k, v in body.items() if k not in ("context_management", "stream")}
        unstreamed = replace(request, body=json.dumps(plain).encode())
        if request.path.endswith("/responses"):
            return self._responses(body, self.inner(unstreamed))
        return self._messages(request, body, unstreamed)

    def _refusal(self, request: Received) -> Reply:
        if request.path.endswith("/responses"):
            message = "Unknown parameter: 'context_management'."
            shape = {"message": message, "type": "invalid_request_error"}
            return json_reply(
                {"error": {**shape, "param": "context_management", "code": None}}, 400
            )
        return error("context_management: Extra inputs are not permitted")

    # --- Responses ------------------------------------------------------------------------------

    def _responses(self, body: dict[str, Any], answer: Reply) -> Reply:
        entries = body["context_management"]
        if not isinstance(entries, list) or any(e.get("type") != "compaction" for e in entries):
            message = "Invalid value for 'context_management': expected entries of type compaction."
            shape = {"message": message, "type": "invalid_request_error"}
            return json_reply(
                {"error": {**shape, "param": "context_management", "code": None}}, 400
            )
        if answer.status != 200:
            return answer
        response = json.loads(b"".join(c for c in answer.chunks if isinstance(c, bytes)))
        threshold = next(
            (
                e.get("compact_threshold")
                for e in body["context_management"]
                if e["type"] == "compaction"
            ),
            None,
        )
        if threshold is not None and tokens(body.get("input")) > threshold:
            item = {
                "type": "compaction",
                "id": "cmp_mock",
                "encrypted_content": "gAAAA-compacted-" + "z" * 32,
                "created_by": "mock",
            }
            response["output"] = [item, *response["output"]]
        if body.get("stream"):
            return self.inner._stream(response)
        return json_reply(response)

    # --- Messages -------------------------------------------------------------------------------

    def _messages(self, request: Received, body: dict[str, Any], unstreamed: Received) -> Reply:
        edits = body["context_management"].get("edits") or []
        flags = {f.strip() for f in request.headers.get("anthropic-beta", "").split(",")}
        for n, edit in enumerate(edits):
            if edit.get("type") not in _EDIT_BETAS:
                found = edit.get("type")
                return error(f"context_management.edits.{n}: Input tag '{found}' is not expected")
            beta = _EDIT_BETAS[edit["type"]]
            if beta not in flags:
                return error(f"context_management.edits: {edit['type']} needs the {beta} beta")
        answer = self.inner(unstreamed)
        if answer.status != 200:
            return answer
        message = json.loads(b"".join(c for c in answer.chunks if isinstance(c, bytes)))
        size = tokens(body["messages"])
        applied, compacted = [], False
        for edit in edits:
            trigger = (edit.get("trigger") or {}).get("value", 100_000)
            if size <= trigger:
                continue
            if edit["type"] == "clear_tool_uses_20250919":
                cleared = _cleared(body["messages"], edit)
                if cleared is not None:
                    applied.append(cleared)
            elif edit["type"] == "compact_20260112":
                compacted = True
        if compacted:
            block = {"type": "compaction", "content": "<summary of the earlier turns>"}
            message["content"] = [block, *message["content"]]
            usage = message["usage"]
            iteration = {
                "type": "compaction",
                "input_tokens": size,
                "output_tokens": 40,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
            usage["iterations"] = [iteration, {**usage, "type": "message"}]
        message["context_management"] = {"applied_edits": applied}
        if body.get("stream"):
            return sse_reply(message_events(message))
        return json_reply(message)


def _unknown_betas(request: Received) -> list[str]:
    flags = [f.strip() for f in request.headers.get("anthropic-beta", "").split(",")]
    return [f for f in flags if f and f not in KNOWN_BETAS]


def _cleared(messages: list[dict[str, Any]], edit: dict[str, Any]) -> dict[str, Any] | None:
    """The applied edit for ``clear_tool_uses_20250919`` on ``messages``, or None."""
    keep = edit.get("keep", {}).get("value", 3)
    spared = set(edit.get("exclude_tools") or ())
    uses = [
        b
        for m in messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use" and b.get("name") not in spared
    ]
    old = {b["id"] for b in uses[: max(0, len(uses) - keep)]}
    results = [
        b
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("tool_use_id") in old
    ]
    freed = tokens(results)
    least = (edit.get("clear_at_least") or {}).get("value", 0)
    if not old or freed < least:
        return None
    return {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": len(old),
        "cleared_input_tokens": freed,
    }


def message_events(message: dict[str, Any]) -> list[bytes]:
    """``message`` as Anthropic streams it: its blocks one by one (a compaction block with a
    ``compaction_delta``), then ``message_delta`` with its usage and ``context_management``."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"]}}
    start.pop("context_management", None)
    start["usage"].pop("iterations", None)
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        opening, delta = dict(block), None
        if kind == "text":
            opening["text"], delta = "", {"type": "text_delta", "text": block["text"]}
        elif kind == "compaction":
            opening["content"] = None
            delta = {"type": "compaction_delta", "content": block["content"]}
        elif kind == "tool_use":
            opening["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events.append(("content_block_start", {"index": index, "content_block": opening}))
        if delta is not None:
            events.append(("content_block_delta", {"index": index, "delta": delta}))
        events.append(("content_block_stop", {"index": index}))
    finished = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    last = {"delta": finished, "usage": message["usage"]}
    if "context_management" in message:
        last["context_management"] = message["context_management"]
    events += [("message_delta", last), ("message_stop", {})]
    return [
        f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
        for name, data in events
    ]
