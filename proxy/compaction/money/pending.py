"""Store writes the request path starts and never waits for: bounded in number, failures logged
and dropped (fail open), and joinable at shutdown and in tests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("proxy.compaction")

MAX_PENDING = 1024  # writes in flight; beyond, a new one is skipped (logged)


class PendingWrites:
    """Fire-and-forget writes of one kind (``what`` names it in the logs)."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, write: Callable[[], Awaitable[Any]]) -> None:
        """Run ``write()`` as a task; the caller never waits for it."""
        if len(self._tasks) >= MAX_PENDING:
            logger.warning("%s skipped: %d writes already pending", self._what, len(self._tasks))
            return
        task = asyncio.get_running_loop().create_task(self._guarded(write))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, write: Callable[[], Awaitable[Any]]) -> None:
        try:
            await write()
        except Exception:  # fail open: these writes steer or report, never serve a request
            logger.exception("%s failed", self._what)

    async def join(self) -> None:
        """Wait for the writes under way (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
