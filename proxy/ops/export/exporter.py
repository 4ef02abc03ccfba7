"""Knowledge-base export: each new summary handed to the sinks the config names.

    summary stored -> Exporter.publish (never waits) -> one bounded queue per sink -> its worker
                                                          -> JSONL file | Redis Stream | webhook

A summary is message content, so nothing is exported unless ``export:`` names a sink. Each sink
has a queue of ``export.queue`` summaries and one worker: a slow or failing sink never holds up a
request or another sink; a summary arriving at a full queue is dropped and counted, a delivery
that fails is logged (without content) and counted (``proxy_export_events``).

The exporter hears of summaries as events (``subscribe``), so nothing on the request path calls
it by name. The sinks are ``jsonl``, ``stream`` and ``webhook`` beside this module; the event they
are given is ``proxy.ops.export.events.SummaryEvent`` (re-exported here: the hook contract in
docs/operations.md imports it from this module).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from proxy.config.ops import ExportSettings
from proxy.errors import ExportError
from proxy.events import Listeners
from proxy.ops.export.events import EVENT_TYPE, StoredSummary, SummaryEvent
from proxy.ops.export.jsonl import JsonlSink
from proxy.ops.export.stream import RedisStreamSink
from proxy.ops.export.webhook import WebhookSink

__all__ = ["EVENT_TYPE", "Exporter", "Sink", "SummaryEvent", "export_events", "open_sinks"]

logger = logging.getLogger("proxy.export")


class Sink(Protocol):
    """Where summaries go; ``deliver`` raises ExportError once it has given up on one."""

    name: str

    async def deliver(self, event: SummaryEvent, body: bytes) -> None: ...

    async def aclose(self) -> None: ...


class Exporter:
    """Fans each summary out to the sinks, each through its own bounded queue and worker."""

    def __init__(self, sinks: Sequence[Sink], *, queue: int, events: Counter) -> None:
        self._sinks = list(sinks)
        self._queues: list[asyncio.Queue[tuple[SummaryEvent, bytes]]] = [
            asyncio.Queue(maxsize=queue) for _ in self._sinks
        ]
        self._events = events
        self._workers: list[asyncio.Task[None]] = []

    @property
    def enabled(self) -> bool:
        return bool(self._sinks)

    def subscribe(self, listeners: Listeners, event_type: type[StoredSummary]) -> None:
        """Publish each ``event_type`` event the listeners hear (the app wires this to the event
        compaction emits when it stores a summary); nothing is subscribed without a sink."""
        if self.enabled:
            listeners.subscribe(event_type, lambda event: self.publish(SummaryEvent.of(event)))

    def publish(self, event: SummaryEvent) -> None:
        """Queue ``event`` for every sink; never waits (a full queue drops it, counted)."""
        if not self._sinks:
            return
        if not self._workers:  # started on first use, inside the running event loop
            self._workers = [
                asyncio.create_task(self._work(sink, queue))
                for sink, queue in zip(self._sinks, self._queues, strict=True)
            ]
        body = event.encode()
        for sink, queue in zip(self._sinks, self._queues, strict=True):
            try:
                queue.put_nowait((event, body))
            except asyncio.QueueFull:
                self._events.labels(sink.name, "dropped").inc()
                logger.warning("export to %s: queue full, summary dropped", sink.name)

    async def _work(self, sink: Sink, queue: asyncio.Queue[tuple[SummaryEvent, bytes]]) -> None:
        while True:
            event, body = await queue.get()
            try:
                await sink.deliver(event, body)
                self._events.labels(sink.name, "sent").inc()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fail open: one summary lost, the worker goes on
                self._events.labels(sink.name, "failed").inc()
                reason = exc.message if isinstance(exc, ExportError) else type(exc).__name__
                logger.warning(
                    "export to %s failed for checkpoint %s: %s",
                    sink.name,
                    event.checkpoint.id,
                    reason,
                )
            finally:
                queue.task_done()

    async def join(self) -> None:
        """Wait until every queued summary was delivered or given up on (tests, shutdown)."""
        await asyncio.gather(*(queue.join() for queue in self._queues))

    async def aclose(self, grace: float) -> None:
        if self._workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.join(), timeout=grace)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for sink in self._sinks:
            await sink.aclose()


def export_events(registry: CollectorRegistry) -> Counter:
    return Counter(
        "proxy_export_events",
        "Summaries handed to an export sink, by sink and outcome (sent; failed: given up on; "
        "dropped: the sink's queue was full).",
        ["sink", "outcome"],
        registry=registry,
    )


def open_sinks(settings: ExportSettings) -> list[Sink]:
    """The sinks ``export:`` names, in a fixed order."""
    sinks: list[Sink] = []
    if settings.jsonl is not None:
        sinks.append(JsonlSink(settings.jsonl))
    if settings.redis_stream is not None:
        sinks.append(RedisStreamSink(settings.redis_stream))
    if settings.webhook is not None:
        sinks.append(WebhookSink(settings.webhook))
    return sinks
