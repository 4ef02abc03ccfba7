"""What the recall loop needs of a dialect: the tool in the dialect's own shape, a
reply read for tool calls, and the body that asks again with the recall answered. Compaction
defines it; each dialect implements it (``proxy/dialects/*_recall.py``) and offers it as its
``recall`` attribute; the forwarder's loop (``proxy/proxying/recall/loop.py``) drives it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# What a stream event tells about the reply so far (``RecallShape.classify``).
UNDECIDED = 0  # opening events, reasoning, empty deltas: not known yet
TEXT = 1  # the reply starts with text for the client: relay it, never a recall-only reply
TOOL = 2  # the reply calls a tool: read it to its end before deciding


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True)
class ModelReply:
    """A reply read whole: its tool calls, and the wire items that carry them (what is sent back
    as the assistant's turn when asking again)."""

    calls: tuple[ToolCall, ...]
    turn: Sequence[Any] = field(default_factory=tuple)


@dataclass(frozen=True)
class Answered:
    """A reply's recall calls answered: ``answers`` maps each call id to its tool result; the
    calls named ``name`` are the recall's; ``last``: the next reply must not call a tool."""

    reply: ModelReply
    answers: Mapping[str, str]
    name: str
    last: bool


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one: a provider's answer is read for
    what it holds, never trusted to have the documented shape."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


class StreamSplice(Protocol):
    """How a stream the client is reading goes on with the events of another answer (the one
    that came after a recall answered mid-reply): opening events dropped, positions and ids
    carried on from what the client has, the end made to describe the whole reply."""

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """One event of the answer that goes on, as the client must see it; None: drop it."""


class CallStrip(Protocol):
    """Takes the recall calls out of an answer the client will receive: one whose provider
    called the tool although the re-ask that ended the rounds forbade it (some compatible
    servers ignore ``tool_choice: none``). What is left reads as if they were never made: the
    other blocks, items or calls numbered on without them, and a stop reason that no longer
    says "tool use" when no call of the client's is left."""

    def continued(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """One stream event without its recall calls; None: drop it."""

    def whole(self, body: dict[str, Any]) -> dict[str, Any]:
        """A whole answer without its recall calls."""


class RecallShape(Protocol):
    """One dialect's side of the recall tool."""

    # Bytes in every stream event that may start a tool call: events without them are relayed
    # unparsed once the reply showed text.
    call_marker: bytes

    def offer(self, body: dict[str, Any], name: str, description: str) -> dict[str, Any] | None:
        """``body`` with the recall tool added, or None when it must not be: the client declared
        a tool of that name, or its tool_choice forbids tools."""

    def read(self, data: bytes) -> ModelReply | None:
        """A whole (non-streamed) reply; None when it is not one this dialect can read."""

    def classify(self, event: Mapping[str, Any]) -> int:
        """What one parsed stream event says: ``UNDECIDED``, ``TEXT`` or ``TOOL``."""

    def read_stream(self, events: Sequence[Mapping[str, Any]]) -> ModelReply | None:
        """A streamed reply from its parsed events."""

    def ask_again(self, body: dict[str, Any], answered: Answered) -> dict[str, Any]:
        """``body`` followed by the assistant's recall calls (only those: the model calls its
        client tools again once it has what it recalled) and their results."""

    def splice(self, relayed: Sequence[Mapping[str, Any]]) -> StreamSplice:
        """How another answer's events go on from ``relayed``, the events the client has."""

    def strip(self, name: str) -> CallStrip:
        """How one answer's calls of the tool ``name`` are taken out (a new one per answer)."""
