"""Failing backends: the circuit breaker, fail-open, the in-process fallback, health, counters."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from proxy.core.checkpoints import Checkpoint
from proxy.errors import StoreError
from proxy.state.conversations import Store
from proxy.state.store.breaker import CircuitBreaker
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy
from tests.support.stores import store_settings

MESSAGES = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FlakyBackend(MemoryBackend):
    """A memory backend that can be made to fail, hang or interleave, like a sick Redis."""

    name = "flaky"

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.delay = 0.0
        self.calls = 0

    async def _gate(self) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            raise StoreError("connection refused")

    async def get(self, key: str, **kwargs: Any) -> bytes | None:
        await self._gate()
        return await super().get(key, **kwargs)

    async def compare_and_set(self, *args: Any, **kwargs: Any) -> bool:
        await self._gate()
        return await super().compare_and_set(*args, **kwargs)

    async def acquire(self, key: str, token: str, *, ttl_ms: int) -> bool:
        await self._gate()
        return await super().acquire(key, token, ttl_ms=ttl_ms)

    async def release(self, key: str, token: str) -> bool:
        await self._gate()
        return await super().release(key, token)

    async def delete(self, key: str) -> bool:
        await self._gate()
        return await super().delete(key)

    async def ping(self) -> None:
        await self._gate()


def make_store(
    backend: FlakyBackend, *, fallback: bool = True, clock: Clock | None = None, **overrides: Any
) -> Store:
    settings = store_settings("redis://unused", **overrides)
    return Store(
        backend,
        settings=settings,
        tenancy=Tenancy.from_settings(settings),
        fallback=MemoryBackend() if fallback else None,
        breaker=CircuitBreaker(failures=3, cooldown=1.0, clock=clock or Clock()),
    )


def test_breaker_opens_after_failures_and_probes_once_per_cooldown() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=2, cooldown=5.0, clock=clock)
    assert breaker.allow() and breaker.state == "closed"
    breaker.record_failure()
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    clock.now += 5
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # only one
    breaker.record_failure()
    clock.now += 4.9
    assert not breaker.allow()
    clock.now += 0.2
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow() and breaker.allow()


def test_a_success_resets_the_count() -> None:
    breaker = CircuitBreaker(failures=2, cooldown=5.0, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


@pytest.mark.anyio
async def test_outage_fails_open_is_logged_once_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend, clock = FlakyBackend(), Clock()
    store = make_store(backend, clock=clock)
    cp = Checkpoint.create(MESSAGES, covered=2, summary="s")
    assert await store.add_checkpoint("t", "c", cp)
    healthy_calls = backend.calls
    backend.down = True
    with caplog.at_level(logging.WARNING, logger="proxy.store.conversations"):
        for _ in range(10):
            assert await store.load("t", "c") is None  # the shared record is out of reach
        assert (await store.health()).state == "degraded"
        assert store.state().reason is not None and "connection refused" in store.state().reason
        # After three failures the breaker skips the backend entirely.
        assert backend.calls == healthy_calls + 3
        assert store.counters.errors == 3 and store.counters.skipped >= 7
        # In-process fallback: the replica keeps working on its own state meanwhile.
        local = Checkpoint.create(MESSAGES, covered=1, summary="local")
        assert await store.add_checkpoint("t", "c", local)
        record = await store.load("t", "c")
        assert record is not None and record.checkpoints == (local,)
        backend.down = False
        clock.now += 1.0
        record = await store.load("t", "c")  # the probe succeeds
    assert record is not None and record.checkpoints == (cp,)
    assert store.state().state == "ok"
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("failing" in m for m in warnings) == 1
    assert sum("recovered" in m for m in warnings) == 1


@pytest.mark.anyio
async def test_without_fallback_calls_become_misses() -> None:
    backend = FlakyBackend()
    store = make_store(backend, fallback=False)
    backend.down = True
    cp = Checkpoint.create(MESSAGES, covered=2, summary="s")
    assert await store.load("t", "c") is None
    assert not await store.add_checkpoint("t", "c", cp)
    assert await store.acquire_lock("t", "c") is None
    assert not await store.release_lock("t", "c", "r.token")
    with pytest.raises(StoreError):
        await store.delete("t", "c")
    with pytest.raises(StoreError):
        await store.inspect("t", "c")
    with pytest.raises(StoreError):
        await store.list_conversations("t")


@pytest.mark.anyio
async def test_slow_backend_is_cut_at_the_operation_timeout() -> None:
    backend = FlakyBackend()
    store = make_store(backend, operation_timeout_seconds=0.05)
    backend.delay = 1.0
    started = asyncio.get_running_loop().time()
    assert await store.load("t", "c") is None
    assert asyncio.get_running_loop().time() - started < 0.5
    assert store.counters.errors == 1 and store.state().state == "degraded"


@pytest.mark.anyio
async def test_lock_falls_back_in_process_during_an_outage() -> None:
    backend = FlakyBackend()
    store = make_store(backend)
    backend.down = True
    token = await store.acquire_lock("t", "c")
    assert token is not None and token.startswith("l.")
    assert await store.acquire_lock("t", "c") is None  # still single-flight within the replica
    assert await store.release_lock("t", "c", token)
    assert await store.acquire_lock("t", "c") is not None


@pytest.mark.anyio
async def test_a_cancelled_caller_is_not_a_store_failure() -> None:
    backend = FlakyBackend()
    store = make_store(backend)
    backend.delay = 0.2
    task = asyncio.create_task(store.load("t", "c"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.counters.errors == 0 and store.state().state == "ok"


@pytest.mark.anyio
async def test_interleaved_writers_retry_until_nothing_is_lost() -> None:
    backend = FlakyBackend()
    backend.delay = 0.001  # every call yields, so read-modify-write cycles interleave
    store = make_store(backend, max_checkpoints=64, operation_timeout_seconds=2)
    root = Checkpoint.create(MESSAGES, covered=1, summary="root")
    assert await store.add_checkpoint("t", "c", root)
    children = [
        Checkpoint.create(MESSAGES, covered=2, summary=str(i), parent_id=root.id) for i in range(20)
    ]
    assert all(await asyncio.gather(*(store.add_checkpoint("t", "c", c) for c in children)))
    assert store.counters.write_conflicts > 0
    record = await store.load("t", "c")
    assert record is not None and len(record.checkpoints) == 21
