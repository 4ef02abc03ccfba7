"""Benchmark of the conversation store. Run: ``.venv/bin/python -m tests.bench.bench_store``.

Starts its own redis-server (a free port, a temp dir, stopped by its pid) and prints, in one run:
store round trips per request on the fast path, p50/p99 latency of a checkpoint lookup (load +
deepest match) against the local Redis and the memory backend, lookup throughput at concurrency
32, and the time to hash a 1 MB history.
"""

from __future__ import annotations

import asyncio
import base64
import statistics
import time
from typing import Any

from pydantic import SecretStr
from redis.asyncio import Redis

from proxy.config.settings import StoreSettings
from proxy.core.checkpoints import Checkpoint, chain_hash, find_deepest
from proxy.state.conversations import Store
from proxy.state.opening import open_store
from tests.support.redis_server import RedisServer, redis_available

SECRET = SecretStr("bench-secret-0123456789abcdef")
KEY = SecretStr("bench:" + base64.b64encode(b"k" * 32).decode())
LOOKUPS = 2000
CONCURRENCY = 32


def history(total_bytes: int, *, message_bytes: int = 2000) -> list[dict[str, Any]]:
    """A chat of user/assistant turns with a tool call now and then, about ``total_bytes`` long."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    i = 0
    while sum(len(str(m.get("content", ""))) for m in messages) < total_bytes:
        if i % 10 == 3:
            call = {"id": f"call_{i}", "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "x"}'}}  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{i}", "content": "r" * message_bytes}
            )
        else:
            role = "user" if i % 2 == 0 else "assistant"
            messages.append({"role": role, "content": f"turn {i} " + "w" * message_bytes})
        i += 1
    return messages


async def seed(store: Store, messages: list[dict[str, Any]]) -> None:
    parent = None
    step = max(1, len(messages) // 10)
    for covered in range(step, len(messages) - 2, step):
        cp = Checkpoint.create(messages, covered=covered, summary="s" * 2000,
                               parent_id=parent, summary_tokens=500)  # fmt: skip
        assert await store.add_checkpoint("tenant", "conv", cp)
        parent = cp.id


async def lookup(store: Store, messages: list[dict[str, Any]]) -> None:
    record = await store.load("tenant", "conv")
    assert find_deepest(record, messages) is not None


async def latencies(store: Store, messages: list[dict[str, Any]]) -> list[float]:
    out = []
    for _ in range(LOOKUPS):
        started = time.perf_counter()
        await lookup(store, messages)
        out.append(time.perf_counter() - started)
    return out


async def throughput(store: Store, messages: list[dict[str, Any]]) -> float:
    per_worker = LOOKUPS // CONCURRENCY

    async def worker() -> None:
        for _ in range(per_worker):
            await lookup(store, messages)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return per_worker * CONCURRENCY / (time.perf_counter() - started)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


async def redis_round_trips(url: str, store: Store, messages: list[dict[str, Any]]) -> float:
    probe = Redis.from_url(url)
    try:
        await lookup(store, messages)  # the connection is made and set up before counting
        await probe.config_resetstat()
        for _ in range(100):
            await lookup(store, messages)
        stats = await probe.info("commandstats")
        own = {"cmdstat_info", "cmdstat_config|resetstat"}
        return sum(v["calls"] for k, v in stats.items() if k not in own) / 100
    finally:
        await probe.aclose()


async def main() -> None:
    messages = history(50_000)
    big = history(1_000_000)
    size = sum(len(str(m)) for m in big)
    hash_times = []
    for _ in range(20):
        started = time.perf_counter()
        chain_hash(big)
        hash_times.append(time.perf_counter() - started)
    print(f"hashing a {size / 1e6:.2f} MB history ({len(big)} messages): "
          f"median {statistics.median(hash_times) * 1000:.2f} ms")  # fmt: skip

    if not redis_available():
        raise SystemExit("redis-server not found; install it (apt-get install redis-server)")
    print(f"lookup = load + deepest match over a {len(messages)}-message (~50 kB) history, "
          f"record of 9 checkpoints; {LOOKUPS} lookups each")  # fmt: skip
    with RedisServer() as server:
        cases = {
            "memory": StoreSettings(url="memory://", tenant_secret=SECRET),
            "redis": StoreSettings(url=server.url, tenant_secret=SECRET),
            "redis+aes-gcm": StoreSettings(
                url=server.url, tenant_secret=SECRET, encryption_keys=(KEY,)
            ),
        }
        for name, settings in cases.items():
            store = open_store(settings)
            try:
                await store.delete("tenant", "conv")
                await seed(store, messages)
                before = store.counters.backend_calls
                lat = await latencies(store, messages)
                calls = (store.counters.backend_calls - before) / LOOKUPS
                rate = await throughput(store, messages)
                line = (f"{name:>14}: p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms  "
                        f"{rate:,.0f} lookups/s at concurrency {CONCURRENCY}  "
                        f"store calls/lookup {calls:.2f}")  # fmt: skip
                if name.startswith("redis"):
                    trips = await redis_round_trips(server.url, store, messages)
                    line += f"  redis commands/lookup {trips:.2f}"
                print(line)
                assert store.counters.errors == 0
            finally:
                await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
