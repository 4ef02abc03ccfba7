"""The ``recall:`` section: the originals the proxy keeps of what it compacted, and the tool
the model fetches them with (docs/recall.md)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from proxy.config.sections import Section

DEFAULT_DESCRIPTION = (
    "Fetch the exact original of something removed from this conversation to save context: a "
    "tool result shown as '[tool result cleared ... recall id rXXXX]' or a turn listed in the "
    "summary's recall index. Pass its recall id; with query, only the matching lines (and a few "
    "around them) come back."
)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class RecallSettings(Section):
    enabled: bool = Field(
        True,
        description="Keep what compaction removed and offer the model a tool to fetch it back.",
    )
    tool_name: str = Field(
        "context_recall",
        description="The name of the tool the proxy adds and answers itself; a client tool of "
        "the same name turns recall off for that request.",
    )
    description: str = Field(
        DEFAULT_DESCRIPTION,
        min_length=1,
        description="The tool's description, as the model sees it.",
    )
    max_rounds: int = Field(
        3,
        ge=1,
        le=16,
        description="Most recall rounds one request may take; the last re-ask forbids tools.",
    )
    max_result_bytes: int = Field(
        16_384, ge=256, description="Largest text one recall returns (longer is cut, marked)."
    )
    timeout_seconds: float = Field(
        60,
        gt=0,
        description="Time the recall rounds of one request may take before the re-ask forbids "
        "tools.",
    )
    budget_bytes: int = Field(
        262_144,
        ge=1024,
        description="Originals kept per conversation; past it the oldest are evicted.",
    )
    index_entries: int = Field(
        24, ge=0, description="Most entries in the recall index at the end of a summary."
    )

    @field_validator("tool_name")
    @classmethod
    def _tool_name(cls, value: str) -> str:
        if not _TOOL_NAME.match(value):
            raise ValueError("must be 1-64 letters, digits, '_' or '-' (every provider's rule)")
        return value
