"""The in-process store never makes its caller wait, so its calls run without a deadline
(``proxy.state.resilient``): each of its methods finishes without suspending. A backend built on
it that may wait (another class) keeps the deadline."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from proxy.state.conversations import Store
from proxy.state.store.base import IndexEntry
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy
from tests.support.stores import store_settings

ENTRY = IndexEntry("index", "k", 1.0, 60_000, 10)
# One call of each coroutine method, on a backend holding "k" (and a lock on "lock").
CALLS: dict[str, Callable[[MemoryBackend], Coroutine[Any, Any, Any]]] = {
    "get": lambda b: b.get("k", ttl_ms=60_000, touch=ENTRY),
    "get_many": lambda b: b.get_many(["k", "missing"]),
    "index_add": lambda b: b.index_add(ENTRY),
    "index_page": lambda b: b.index_page("index", before=None, limit=10),
    "index_remove": lambda b: b.index_remove("index", ["k"]),
    "compare_and_set": lambda b: b.compare_and_set("k", b"v", b"w", ttl_ms=60_000),
    "delete": lambda b: b.delete("k"),
    "acquire": lambda b: b.acquire("lock", "other", ttl_ms=60_000),
    "release": lambda b: b.release("lock", "token"),
    "set_forever": lambda b: b.set_forever("s", b"v", only_if_absent=True),
    "scan": lambda b: b.scan("", limit=10),
    "ttl_ms": lambda b: b.ttl_ms("k"),
    "ping": lambda b: b.ping(),
    "aclose": lambda b: b.aclose(),
}


def finished(call: Coroutine[Any, Any, Any]) -> None:
    """``call`` ran to its end in one step: it never suspended."""
    try:
        call.send(None)
    except StopIteration:
        return
    call.close()
    raise AssertionError("the call suspended")


def test_every_method_of_the_in_process_store_finishes_without_waiting() -> None:
    methods = {n for n, f in inspect.getmembers(MemoryBackend) if inspect.iscoroutinefunction(f)}
    assert methods == set(CALLS)  # a new method is checked here too
    for call in CALLS.values():
        backend = MemoryBackend()
        finished(backend.compare_and_set("k", None, b"v", ttl_ms=60_000))
        finished(backend.acquire("lock", "token", ttl_ms=60_000))
        finished(call(backend))


class SlowMemory(MemoryBackend):
    """The in-process store's name, but a read that waits."""

    async def get(self, key: str, **kwargs: Any) -> bytes | None:
        await asyncio.sleep(1.0)
        return await super().get(key, **kwargs)


@pytest.mark.anyio
async def test_a_store_built_on_the_in_process_one_that_waits_keeps_its_deadline() -> None:
    settings = store_settings("memory://", operation_timeout_seconds=0.05)
    store = Store(SlowMemory(), settings=settings, tenancy=Tenancy.from_settings(settings))
    started = asyncio.get_running_loop().time()
    assert await store.load("t", "c") is None
    assert asyncio.get_running_loop().time() - started < 0.5
    assert store.counters.errors == 1


@pytest.mark.anyio
async def test_the_in_process_store_sets_no_timer() -> None:
    settings = store_settings("memory://")
    store = Store(MemoryBackend(), settings=settings, tenancy=Tenancy.from_settings(settings))
    loop = asyncio.get_running_loop()
    timers = len(loop._scheduled)  # type: ignore[attr-defined]
    assert await store.load("t", "c") is None
    assert len(loop._scheduled) == timers  # type: ignore[attr-defined]
