"""The recall tool's counters on /metrics, from the events of
``proxy/compaction/recall/events.py``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from proxy.compaction.recall.events import (
    OriginalsKept,
    RecallAnswered,
    RecallOffered,
    RecallRounds,
)
from proxy.events import Listeners


class RecallMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.offered = Counter(
            "proxy_recall_offered",
            "Requests sent with the recall tool (they referred to kept originals).",
            registry=registry,
        )
        self.calls = Counter(
            "proxy_recall_calls",
            "Recall calls answered, by outcome: found, missing (unknown or expired), "
            "unavailable (the store failed).",
            ["outcome"],
            registry=registry,
        )
        self.rounds = Counter(
            "proxy_recall_rounds",
            "Recall rounds: provider calls made to answer a recall.",
            registry=registry,
        )
        self.tokens = Counter(
            "proxy_recall_tokens",
            "Tokens the provider billed for recall rounds (prompt and completion).",
            registry=registry,
        )
        self.kept = Counter(
            "proxy_recall_originals_kept", "Originals written to the store.", registry=registry
        )
        self.evicted = Counter(
            "proxy_recall_originals_evicted",
            "Originals evicted, oldest first, to stay within recall.budget_bytes.",
            registry=registry,
        )

    def subscribe(self, listeners: Listeners) -> None:
        listeners.subscribe(RecallOffered, lambda e: self.offered.inc())
        listeners.subscribe(RecallAnswered, lambda e: self.calls.labels(e.outcome).inc())
        listeners.subscribe(RecallRounds, self._rounds)
        listeners.subscribe(OriginalsKept, self._kept)

    def _rounds(self, event: RecallRounds) -> None:
        self.rounds.inc(event.rounds)
        self.tokens.inc(event.tokens)

    def _kept(self, event: OriginalsKept) -> None:
        self.kept.inc(event.added)
        self.evicted.inc(event.evicted)
