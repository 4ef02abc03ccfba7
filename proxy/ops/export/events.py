"""What the export sinks and the ``after_summary`` hooks are given: a summary just stored.

``SummaryEvent`` is part of the hook contract (docs/operations.md imports it from
``proxy.ops.export.exporter``, which re-exports it). The exporter hears of a stored summary through
``proxy.events.Listeners`` (``Exporter.subscribe``): any event with the fields of ``StoredSummary``
will do, whatever package emits it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.checkpoints import Checkpoint
from proxy.core.plan_view import describe_checkpoint

EVENT_TYPE = "summary.created"


class StoredSummary(Protocol):
    """The fields an emitted summary-stored event must have for the exporter to take it."""

    @property
    def tenant(self) -> str: ...

    @property
    def conversation_id(self) -> str: ...

    @property
    def policy(self) -> str: ...

    @property
    def checkpoint(self) -> Checkpoint: ...


@dataclass(frozen=True)
class SummaryEvent:
    """A summary just stored, with whose it is: what hooks and sinks are given."""

    tenant: str  # as the admin API shows it
    conversation_id: str  # as the client named it (unique within the tenant)
    policy: str
    checkpoint: Checkpoint

    @classmethod
    def of(cls, stored: StoredSummary) -> SummaryEvent:
        if isinstance(stored, SummaryEvent):
            return stored
        return cls(stored.tenant, stored.conversation_id, stored.policy, stored.checkpoint)

    def payload(self) -> dict[str, Any]:
        """The JSON every sink writes: the admin API's view of the checkpoint, flattened."""
        view = describe_checkpoint(self.checkpoint)
        return {
            "type": EVENT_TYPE,
            "tenant": self.tenant,
            "conversation_id": self.conversation_id,
            "policy": self.policy,
            "checkpoint_id": view.pop("id"),
            **view,
        }

    def encode(self) -> bytes:
        return json.dumps(self.payload(), ensure_ascii=False, separators=(",", ":")).encode()
