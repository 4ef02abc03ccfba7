"""Bounded background work (ahead-of-time summaries): a queue with a size limit, a fixed number
of workers, at most one job per key in flight. Overflow is dropped and counted, never queued
without bound; shutdown lets running jobs finish for a grace period, then cancels them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger("proxy.background")

Job = Callable[[], Awaitable[None]]


class BackgroundQueue:
    def __init__(self, *, max_queue: int, concurrency: int) -> None:
        self._queue: asyncio.Queue[tuple[str, Job]] = asyncio.Queue(maxsize=max_queue)
        self._concurrency = concurrency
        self._keys: set[str] = set()  # queued or running
        self._workers: list[asyncio.Task[None]] = []
        self.dropped = 0
        self.failed = 0
        self.done = 0

    @property
    def depth(self) -> int:
        """Jobs waiting or running."""
        return len(self._keys)

    def busy(self, key: str) -> bool:
        return key in self._keys

    def submit(self, key: str, job: Job) -> bool:
        """Queue ``job`` unless one for ``key`` is already queued or running, or the queue is
        full (then it is dropped and counted). Returns whether it was queued."""
        if key in self._keys:
            return False
        try:
            self._queue.put_nowait((key, job))
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        self._keys.add(key)
        if not self._workers:
            self._workers = [asyncio.create_task(self._work()) for _ in range(self._concurrency)]
        return True

    async def _work(self) -> None:
        while True:
            key, job = await self._queue.get()
            try:
                await job()
                self.done += 1
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed job must not kill the worker; the job logs its reason
                self.failed += 1
                logger.exception("background job failed")
            finally:
                self._keys.discard(key)
                self._queue.task_done()

    async def join(self) -> None:
        """Wait until every queued job has run (tests and shutdown)."""
        await self._queue.join()

    async def aclose(self, grace: float) -> None:
        if self._workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), timeout=grace)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
