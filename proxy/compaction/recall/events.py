"""Events of the recall tool, heard by ``proxy/ops/recall_metrics.py``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecallOffered:
    """A request went out with the recall tool (it carried ``handles`` handles)."""

    handles: int


@dataclass(frozen=True, slots=True)
class RecallAnswered:
    """One recall call answered: ``found``, ``missing`` (unknown or expired) or ``unavailable``
    (the store failed)."""

    outcome: str


@dataclass(frozen=True, slots=True)
class RecallRounds:
    """A request's recall rounds once its final answer is chosen: how many ran and the tokens
    the provider billed for them (prompt and completion, all rounds)."""

    rounds: int
    tokens: int


@dataclass(frozen=True, slots=True)
class OriginalsKept:
    """Originals written to the store for a conversation; ``evicted``: the oldest dropped to
    stay within ``recall.budget_bytes``."""

    added: int
    evicted: int
