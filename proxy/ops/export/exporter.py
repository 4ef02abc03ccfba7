"""Knowledge-base export: each new summary handed to the sinks the config names (issue 12).

    summary stored -> Exporter.publish (never waits) -> one bounded queue per sink -> its worker
                                                          -> JSONL file | Redis Stream | webhook

A summary is message content, so nothing is exported unless ``export:`` names a sink. Each sink
has a queue of ``export.queue`` summaries and one worker: a slow or failing sink never holds up a
request or another sink; a summary arriving at a full queue is dropped and counted, a delivery
that fails is logged (without content) and counted (``proxy_export_events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
import redis.asyncio
from prometheus_client import CollectorRegistry, Counter

from proxy.config.ops import ExportSettings, JsonlExport, RedisStreamExport
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan_view import describe_checkpoint
from proxy.errors import ExportError
from proxy.ops.export.webhook import WebhookSink

logger = logging.getLogger("proxy.export")

EVENT_TYPE = "summary.created"


@dataclass(frozen=True)
class SummaryEvent:
    """A summary just stored, with whose it is: what hooks and sinks are given."""

    tenant: str  # as the admin API shows it
    conversation_id: str  # as the client named it (unique within the tenant)
    policy: str
    checkpoint: Checkpoint

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


class Sink(Protocol):
    """Where summaries go; ``deliver`` raises ExportError once it has given up on one."""

    name: str

    async def deliver(self, event: SummaryEvent, body: bytes) -> None: ...

    async def aclose(self) -> None: ...


class JsonlSink:
    """One JSON line per summary, appended with a single write (the file is opened for each, so
    a rotated file is picked up; several workers appending share it line by line)."""

    name = "jsonl"

    def __init__(self, settings: JsonlExport) -> None:
        self._path = settings.path

    async def deliver(self, event: SummaryEvent, body: bytes) -> None:
        try:
            await asyncio.to_thread(self._append, body + b"\n")
        except OSError as exc:
            raise ExportError(f"cannot append to the export file: {exc.strerror}") from exc

    def _append(self, line: bytes) -> None:
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    async def aclose(self) -> None:
        return None


class RedisStreamSink:
    """XADD of each summary's fields (strings; null as ""), the stream capped near ``maxlen``."""

    name = "redis_stream"

    def __init__(self, settings: RedisStreamExport) -> None:
        self._settings = settings
        self._client = redis.asyncio.Redis.from_url(
            settings.url, socket_timeout=5, socket_connect_timeout=5
        )

    async def deliver(self, event: SummaryEvent, body: bytes) -> None:
        fields = {k: _field(v) for k, v in event.payload().items()}
        try:
            await self._client.xadd(
                self._settings.stream, fields, maxlen=self._settings.maxlen, approximate=True
            )
        except (redis.RedisError, OSError) as exc:
            raise ExportError(f"XADD failed: {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _field(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


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
