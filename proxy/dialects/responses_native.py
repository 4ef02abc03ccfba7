"""The Responses API's own context management, as ``strategy: native`` asks for it.

Wire format from openai-python 3.3.1 (``types/responses/response_create_params.py``
``ContextManagement``: ``{"type": "compaction", "compact_threshold": N}`` in the list
``context_management``; ``types/responses/response_compaction_item.py``: an output item
``{"type": "compaction", "id", "encrypted_content"}``, also streamed as
``response.output_item.done``). No beta flag is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.compaction.dialect.native import NativeAsk, NativeReport
from proxy.dialects.sse import json_objects

FIELD = "context_management"
COMPACTION = "compaction"


class ResponsesNative:
    def add(self, body: dict[str, Any], ask: NativeAsk) -> tuple[dict[str, Any], tuple[str, ...]]:
        entries = body.get(FIELD)
        if not ask.compaction or not isinstance(entries, list | None):
            return body, ()
        entries = list(entries or [])
        if any(isinstance(e, dict) and e.get("type") == COMPACTION for e in entries):
            return body, ()  # the client's own compaction entry wins
        entry: dict[str, Any] = {"type": COMPACTION}
        if ask.trigger_tokens:
            entry["compact_threshold"] = ask.trigger_tokens
        return {**body, FIELD: [*entries, entry]}, ()

    def report(self, decoded: bytes) -> NativeReport:
        items: dict[str, dict[str, Any]] = {}
        for found in json_objects(decoded):
            outputs = found.get("output")  # a whole response
            if isinstance(found.get("response"), dict):  # response.completed and the like
                outputs = found["response"].get("output")
            if isinstance(found.get("item"), dict):  # response.output_item.added / done
                outputs = [found["item"]]
            for item in outputs if isinstance(outputs, list) else ():
                if isinstance(item, dict) and item.get("type") == COMPACTION:
                    items[str(item.get("id") or len(items))] = item
        if not items:
            return NativeReport()
        return NativeReport(edits=(COMPACTION,), compactions=len(items))

    def refuses(self, status: int, decoded: bytes) -> bool:
        return status in (400, 422) and FIELD.encode() in decoded

    def names_ours(self, decoded: bytes, client: dict[str, Any], betas: Sequence[str]) -> bool:
        # The only thing the proxy adds is the field: ours only when the client sent none.
        return FIELD not in client and FIELD.encode() in decoded


RESPONSES_NATIVE = ResponsesNative()
