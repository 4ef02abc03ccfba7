"""``POST /v1/responses/compact`` (OpenAI's compaction endpoint, which Codex calls on any provider)
and the compaction items the proxy hands out from it (``agent_compaction.CompactWire``;
docs/agent-compaction.md).

Wire format from openai-python 3.57 (``types/responses/compacted_response.py``: ``{"id",
"object": "response.compaction", "created_at", "output", "usage"}``, its ``output`` "a list of
all user messages, followed by a single compaction item"; ``response_compaction_item.py``:
``{"type": "compaction", "id", "encrypted_content"}``) and openai/codex (``codex-api``
``endpoint/compact.rs`` posts ``{"model", "input", "instructions", "tools",
"parallel_tool_calls", ...}`` and reads only ``output``). The request is a Responses body: the
route's translator is the Responses dialect's under another name, so its conversation hashes as
the same history does on ``/v1/responses``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.compaction.agents.items import PREFIX, ItemSeal, is_ours
from proxy.compaction.decision import LocalReply
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.resent import ParsedBody
from proxy.core.summary_message import render_summary_message
from proxy.dialects.base import Neutral
from proxy.dialects.responses import RESPONSES, parse_responses_body
from proxy.errors import ProxyError
from proxy.types import ResponsesItem

_MARK = b'"' + PREFIX.encode()
# What stands for an item of ours that does not open (another caller's, or an old secret's).
NOT_OPENED = "[Earlier turns of this conversation were compacted; their summary is unavailable.]"
# A Responses usage object for an answer no model wrote.
NO_USAGE = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}


class ResponsesCompact:
    """The compact endpoint's translator: the Responses dialect, labelled for its route."""

    name = "responses_compact"
    history_field = "input"
    cache_key_field = None
    native = None
    recall = None
    records = False

    def parse(self, raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
        return parse_responses_body(raw, last, follow)

    def conversation(
        self,
        body: dict[str, Any],
        *,
        facts: FactLookup | None = None,
        parsed: ParsedBody | None = None,
    ) -> Neutral | None:
        return RESPONSES.conversation(body, facts=facts)

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        return RESPONSES.render(body, plan)

    def summary_call(
        self, sent: dict[str, Any], instruction: str, max_tokens: int
    ) -> dict[str, Any] | None:
        return None

    def answer_text(self, answer: dict[str, Any]) -> str | None:
        return None

    def error_body(self, error: ProxyError) -> bytes:
        return RESPONSES.error_body(error)


class CompactItems:
    """The proxy's compaction items in Responses bodies (``CompactWire``)."""

    def holds_items(self, raw: bytes) -> bool:
        return _MARK in raw

    def opened(self, body: dict[str, Any], seal: ItemSeal, tenant: str) -> dict[str, Any]:
        items = body.get("input")
        if not isinstance(items, list) or not any(_ours(item) for item in items):
            return body
        return {
            **body,
            "input": [_open(item, seal, tenant) if _ours(item) else item for item in items],
        }

    def reply(self, body: dict[str, Any], encrypted: str, *, reply_id: str) -> LocalReply:
        items = body.get("input")
        users = [_user(item) for item in items if _is_user(item)] if isinstance(items, list) else []
        item: ResponsesItem = {
            "type": "compaction",
            "id": f"cmp_{reply_id}",
            "encrypted_content": encrypted,
        }
        answer = {
            "id": f"resp_{reply_id}",
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*users, item],
            "usage": NO_USAGE,
        }
        return LocalReply(json.dumps(answer).encode())


def _ours(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "compaction"
        and is_ours(item.get("encrypted_content"))
    )


def _open(item: ResponsesItem, seal: ItemSeal, tenant: str) -> ResponsesItem:
    """The summary an item of ours holds, as a developer message the provider reads (a system
    ``<agent_summary>`` would be taken for one the proxy injected and dropped as stale)."""
    summary = seal.open(tenant, item["encrypted_content"])
    text = render_summary_message(summary)["content"] if summary is not None else NOT_OPENED
    return {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": text}],
    }


def _is_user(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def _user(item: ResponsesItem) -> ResponsesItem:
    """A user message as the endpoint returns it (Codex reads content parts, never a string)."""
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "input_text", "text": content}]
    return {"type": "message", "role": "user", "content": content}


RESPONSES_COMPACT = ResponsesCompact()
COMPACT_ITEMS = CompactItems()
