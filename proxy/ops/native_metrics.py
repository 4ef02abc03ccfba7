"""What the providers' own compaction did (``strategy: native``), on /metrics: the
edits they applied, the tool uses and tokens they cleared, the requests whose fields they
refused. Hears ``proxy.compaction.native.calls``'s events."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from proxy.compaction.native.calls import NativeRefused, NativeReported
from proxy.events import Listeners


class NativeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.edits = Counter(
            "proxy_native_edits",
            "Answers whose provider applied its own context management, by edit "
            "(clear_tool_uses_20250919, compaction, ...; none: asked for, nothing applied).",
            ["route", "edit"],
            registry=registry,
        )
        self.cleared = Counter(
            "proxy_native_cleared",
            "What the providers' clearing edits removed (tool_uses, input_tokens).",
            ["route", "kind"],
            registry=registry,
        )
        self.refusals = Counter(
            "proxy_native_refusals",
            "Requests whose provider refused the context-management fields the proxy added "
            "(sent again without).",
            ["route"],
            registry=registry,
        )

    def subscribe(self, listeners: Listeners) -> None:
        listeners.subscribe(NativeReported, self._reported)
        listeners.subscribe(NativeRefused, self._refused)

    def _reported(self, event: NativeReported) -> None:
        for edit in event.edits or ("none",):
            self.edits.labels(event.route, edit).inc()
        if event.cleared_tool_uses:
            self.cleared.labels(event.route, "tool_uses").inc(event.cleared_tool_uses)
            self.cleared.labels(event.route, "input_tokens").inc(event.cleared_input_tokens)

    def _refused(self, event: NativeRefused) -> None:
        self.refusals.labels(event.route).inc()
