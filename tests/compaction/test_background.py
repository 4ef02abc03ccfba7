"""The bounded queue behind ahead-of-time summaries."""

from __future__ import annotations

import asyncio

import pytest

from proxy.compaction.summaries.background import BackgroundQueue

pytestmark = pytest.mark.anyio


async def test_one_job_per_key_and_overflow_is_dropped_and_counted() -> None:
    queue = BackgroundQueue(max_queue=2, concurrency=1)
    release = asyncio.Event()
    ran: list[str] = []

    def job(name: str):
        async def run() -> None:
            await release.wait()
            ran.append(name)

        return run

    assert queue.submit("a", job("a1"))
    assert not queue.submit("a", job("a2"))  # same conversation: already queued or running
    await asyncio.sleep(0)  # the worker takes "a"
    assert queue.submit("b", job("b"))
    assert queue.submit("c", job("c"))
    assert not queue.submit("d", job("d"))  # two waiting: full
    assert (queue.dropped, queue.depth) == (1, 3)
    release.set()
    await queue.join()
    assert ran == ["a1", "b", "c"]
    assert queue.depth == 0
    await queue.aclose(grace=1)


async def test_a_failing_job_does_not_stop_the_workers() -> None:
    queue = BackgroundQueue(max_queue=4, concurrency=1)
    done: list[int] = []

    async def boom() -> None:
        raise RuntimeError("summarizer exploded")

    async def fine() -> None:
        done.append(1)

    queue.submit("x", boom)
    queue.submit("y", fine)
    await queue.join()
    assert (queue.failed, done) == (1, [1])
    await queue.aclose(grace=1)


async def test_shutdown_waits_for_the_grace_period_then_cancels() -> None:
    queue = BackgroundQueue(max_queue=4, concurrency=2)
    finished: list[str] = []
    cancelled: list[str] = []

    def sleeper(name: str, seconds: float):
        async def run() -> None:
            try:
                await asyncio.sleep(seconds)
                finished.append(name)
            except asyncio.CancelledError:
                cancelled.append(name)
                raise

        return run

    queue.submit("quick", sleeper("quick", 0.05))
    queue.submit("slow", sleeper("slow", 30))
    await queue.aclose(grace=0.3)
    assert finished == ["quick"]
    assert cancelled == ["slow"]
