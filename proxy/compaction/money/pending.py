"""Store writes the request path starts and never waits for: bounded in number, failures logged
and dropped (fail open), and joinable at shutdown and in tests.

A write runs as its own task and its end is heard by a done callback: nothing here calls back
into the module that started it (the event loop runs the write, not this module).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

logger = logging.getLogger("proxy.compaction")

MAX_PENDING = 1024  # writes in flight; beyond, a new one is skipped (logged)


class PendingWrites:
    """Fire-and-forget writes of one kind (``what`` names it in the logs)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, write: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``write()`` as a task; the caller never waits for it."""
        if len(self._tasks) >= MAX_PENDING:
            logger.warning("%s skipped: %d writes already pending", self._what, len(self._tasks))
            return
        task = asyncio.get_running_loop().create_task(write())
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, Exception):  # fail open: these writes steer or report, never serve
            logger.error("%s failed", self._what, exc_info=error)

    async def join(self) -> None:
        """Wait for the writes under way (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
