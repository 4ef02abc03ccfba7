"""Anthropic's context management, as ``strategy: native`` asks for it.

Wire format from anthropic-sdk-python 0.121.0 (``types/beta/``):
``beta_context_management_config_param.py`` (``context_management: {"edits": [...]}``),
``beta_clear_tool_uses_20250919_edit_param.py`` (``trigger``, ``keep``, ``clear_at_least``,
``exclude_tools``, ``clear_tool_inputs``; counts as ``{"type": "input_tokens" | "tool_uses",
"value": N}``), ``beta_compact_20260112_edit_param.py`` (``trigger``, ``instructions``),
``beta_context_management_response.py`` (``applied_edits`` in the message and in the stream's
``message_delta``), ``beta_compaction_block.py`` (a ``compaction`` content block) and
``beta_compaction_iteration_usage.py`` (``usage.iterations`` of type ``compaction``). The beta
flags: ``context-management-2025-06-27`` (``anthropic_beta_param.py``) for clearing, and
``compact-2026-01-12`` for server-side compaction (Anthropic's compaction guide; its trigger is at
least 50,000 input tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.compaction.dialect.native import NativeAsk, NativeReport, NativeUsage
from proxy.dialects.sse import json_objects

FIELD = "context_management"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
COMPACT = "compact_20260112"
CLEARING_BETA = "context-management-2025-06-27"
COMPACT_BETA = "compact-2026-01-12"
MIN_COMPACT_TRIGGER = 50_000
BETA_HEADER = b"anthropic-beta"


def _tokens(value: int) -> dict[str, Any]:
    return {"type": "input_tokens", "value": value}


def _clearing(ask: NativeAsk) -> dict[str, Any]:
    edit: dict[str, Any] = {
        "type": CLEAR_TOOL_USES,
        "keep": {"type": "tool_uses", "value": ask.keep_tool_uses},
    }
    if ask.trigger_tokens:
        edit["trigger"] = _tokens(ask.trigger_tokens)
    if ask.clear_at_least:
        edit["clear_at_least"] = _tokens(ask.clear_at_least)
    if ask.exclude_tools:
        edit["exclude_tools"] = list(ask.exclude_tools)
    if ask.clear_tool_inputs:
        edit["clear_tool_inputs"] = True
    return edit


def _compaction(ask: NativeAsk) -> dict[str, Any]:
    edit: dict[str, Any] = {"type": COMPACT}
    if ask.trigger_tokens:
        edit["trigger"] = _tokens(max(ask.trigger_tokens, MIN_COMPACT_TRIGGER))
    if ask.instructions:
        edit["instructions"] = ask.instructions
    return edit


class AnthropicNative:
    def add(self, body: dict[str, Any], ask: NativeAsk) -> tuple[dict[str, Any], tuple[str, ...]]:
        config = body.get(FIELD)
        if not isinstance(config, dict | None):
            return body, ()
        config = dict(config or {})
        theirs = config.get("edits")
        if not isinstance(theirs, list | None):
            return body, ()
        edits = list(theirs or [])
        kinds = {str(e.get("type", "")) for e in edits if isinstance(e, dict)}
        betas: list[str] = []
        # The client's own edit of a kind wins over ours (docs/policies.md).
        if ask.clear_tool_uses and not any(k.startswith("clear_tool_uses") for k in kinds):
            edits.append(_clearing(ask))
            betas.append(CLEARING_BETA)
        if ask.compaction and not any(k.startswith("compact_") for k in kinds):
            edits.append(_compaction(ask))
            betas.append(COMPACT_BETA)
        if not betas:
            return body, ()
        return {**body, FIELD: {**config, "edits": edits}}, tuple(betas)

    def report(self, decoded: bytes) -> NativeReport:
        edits: list[str] = []
        tool_uses = tokens = compactions = 0
        usage: NativeUsage | None = None
        for found in json_objects(decoded):
            message = found.get("message") if found.get("type") == "message_start" else found
            if not isinstance(message, dict):
                continue
            block = found.get("content_block")  # content_block_start
            blocks = [block] if isinstance(block, dict) else message.get("content")
            for b in blocks if isinstance(blocks, list) else ():
                if isinstance(b, dict) and b.get("type") == "compaction":
                    compactions += 1
            managed = message.get(FIELD)
            applied = managed.get("applied_edits") if isinstance(managed, dict) else None
            for edit in applied if isinstance(applied, list) else ():
                if isinstance(edit, dict):
                    edits.append(str(edit.get("type")))
                    tool_uses += _count(edit.get("cleared_tool_uses"))
                    tokens += _count(edit.get("cleared_input_tokens"))
            usage = _compaction_usage(message.get("usage")) or usage
        if compactions:
            edits.append("compaction")
        return NativeReport(
            edits=tuple(edits),
            cleared_tool_uses=tool_uses,
            cleared_input_tokens=tokens,
            compactions=compactions,
            compaction_usage=usage,
        )

    def refuses(self, status: int, decoded: bytes) -> bool:
        if status not in (400, 422):
            return False
        return any(s in decoded for s in (FIELD.encode(), BETA_HEADER, COMPACT.encode()))

    def names_ours(self, decoded: bytes, client: dict[str, Any], betas: Sequence[str]) -> bool:
        config = client.get(FIELD)
        edits = config.get("edits") if isinstance(config, dict) else None
        kinds = {str(e.get("type", "")) for e in edits or () if isinstance(e, dict)}
        names = [name for name in (CLEAR_TOOL_USES, COMPACT) if name not in kinds]
        names += [flag for flag in (CLEARING_BETA, COMPACT_BETA) if flag not in betas]
        if FIELD not in client:
            names.append(FIELD)
        found = [name.encode() for name in names]
        if not betas:  # a header the client did not send at all
            found.append(BETA_HEADER)
        return any(name in decoded for name in found)


def _compaction_usage(usage: object) -> NativeUsage | None:
    """The compaction iterations' tokens in ``usage.iterations`` (None: none)."""
    iterations = usage.get("iterations") if isinstance(usage, dict) else None
    found = [i for i in iterations or () if isinstance(i, dict) and i.get("type") == "compaction"]
    if not found:
        return None
    kinds = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    totals = {k: sum(_count(i.get(k)) for i in found) for k in (*kinds, "output_tokens")}
    return NativeUsage(**totals)


def _count(value: object) -> int:
    """A count in the provider's answer; what is not a finite number, or is negative, counts 0
    (an answer the proxy cannot read is relayed as it came, never a 500)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value)) if value == value and abs(value) != float("inf") else 0


ANTHROPIC_NATIVE = AnthropicNative()
