"""Redis only: what Redis holds, many processes, cancellation, outages, Sentinel and Cluster."""

from __future__ import annotations

import asyncio
import random
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import pytest
from pydantic import SecretStr
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from proxy.core.checkpoints import Checkpoint
from proxy.errors import ConfigError
from proxy.state import conversations
from proxy.state.opening import open_store
from proxy.state.store.redis import (
    ClusterTarget,
    RedisBackend,
    SentinelTarget,
    parse_cluster_url,
    parse_sentinel_url,
    redact_url,
)
from tests.support.redis_server import RedisServer, free_cluster_port, skip_without_redis
from tests.support.stores import KEY_A, checkpoint, conversation, store_settings

MESSAGES = conversation(40)


@pytest.mark.anyio
async def test_redis_holds_no_raw_id_or_credential_and_every_key_expires(
    shared_redis: RedisServer, redis_raw: Redis
) -> None:
    credential, conv = "sk-live-CREDENTIAL", "acme-support-thread-9"
    store = open_store(
        store_settings(shared_redis.url, ttl_seconds=3600, lock_ttl_seconds=90,
                     encryption_keys=(SecretStr(KEY_A),))
    )  # fmt: skip
    try:
        tenant = store.tenancy.tenant(credential)
        assert await store.add_checkpoint(tenant, conv, checkpoint(MESSAGES, 5))
        assert await store.acquire_lock(tenant, conv) is not None
        keys = [k.decode() for k in await redis_raw.keys("*")]
        assert len(keys) == 3
        index = store.tenancy.index_key(tenant)
        for key in keys:
            for secret in (credential, "CREDENTIAL", conv, "acme", tenant):
                assert secret not in key
            if key == index:  # the listing: record keys by last use, nothing else
                members = await redis_raw.zrange(key, 0, -1)
                assert members == [store.tenancy.record_key(tenant, conv).encode()]
                continue
            value = await redis_raw.get(key)
            assert value is not None and conv.encode() not in value
            assert b"summary of" not in value and credential.encode() not in value
        record_ttl = await redis_raw.pttl(store.tenancy.record_key(tenant, conv))
        index_ttl = await redis_raw.pttl(index)
        lock_ttl = await redis_raw.pttl(store.tenancy.lock_key(tenant, conv))
        assert 3_590_000 < record_ttl <= 3_600_000
        assert 3_590_000 < index_ttl <= 3_600_000
        assert 80_000 < lock_ttl <= 90_000
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_the_fast_path_is_one_round_trip(
    shared_redis: RedisServer, redis_raw: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(store_settings(shared_redis.url))
    try:
        assert await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 5))
        await store.load("t", "c")  # connect (HELLO/CLIENT SETINFO are not per request)
        await redis_raw.config_resetstat()
        sends = []
        send = AbstractConnection.send_packed_command

        async def counted(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
            sends.append(args)
            await send(self, *args, **kwargs)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
        for _ in range(20):
            assert await store.load("t", "c") is not None
        monkeypatch.undo()
        stats = await redis_raw.info("commandstats")
        calls = {k: v["calls"] for k, v in stats.items()}
        assert len(sends) == 20  # one write to the socket per load, one reply read
        # Only GETEX (the read that refreshes the TTL), besides this client's own commands: the
        # listing index moved with the write, and a read moves it at most once a minute.
        assert calls.pop("cmdstat_getex") == 20
        assert set(calls) <= {"cmdstat_info", "cmdstat_config|resetstat"}
        # Once due, the index moves in the same trip as the read.
        monkeypatch.setattr(conversations, "TOUCH_SECONDS", 0.0)
        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
        sends.clear()
        assert await store.load("t", "c") is not None
        monkeypatch.undo()
        stats = await redis_raw.info("commandstats")
        assert len(sends) == 1
        assert stats["cmdstat_zadd"]["calls"] == stats["cmdstat_pexpire"]["calls"] == 1
    finally:
        await store.aclose()


def _write_from_a_process(url: str, worker: int, writers: int, root_id: str) -> list[bool]:
    async def run() -> list[bool]:
        # About CAS under contention, not resilience: a store call timing out on a busy machine
        # fails open (written to the memory fallback, acknowledged) and would read as a loss.
        store = open_store(store_settings(url, max_checkpoints=512, operation_timeout_seconds=10.0))
        try:
            children = [
                Checkpoint.create(
                    MESSAGES,
                    covered=6 + (worker + i) % 30,
                    summary=f"{worker}/{i}",
                    parent_id=root_id,
                )
                for i in range(writers)
            ]

            async def write(child: Checkpoint) -> bool:
                # 200 writers on one key: one may lose every round of its CAS loop on a busy
                # machine and give up (False, nothing written). The app simply tries again on
                # a later request; so does this writer. What must never happen is an
                # acknowledged write that is not in the final record.
                for _ in range(20):
                    if await store.add_checkpoint("t", "c", child):
                        return True
                return False

            results = await asyncio.gather(*(write(c) for c in children))
            return [bool(r) for r in results]
        finally:
            await store.aclose()

    return asyncio.run(run())


def test_fifty_writers_in_four_processes_lose_nothing(shared_redis: RedisServer) -> None:
    with SyncRedis.from_url(shared_redis.url) as raw:
        raw.flushdb()

    async def seed() -> tuple[str, int]:
        store = open_store(store_settings(shared_redis.url, max_checkpoints=512))
        try:
            root = checkpoint(MESSAGES, 5)
            assert await store.add_checkpoint("t", "c", root)
            return root.id, 0
        finally:
            await store.aclose()

    root_id, _ = asyncio.run(seed())
    processes, writers = 4, 50
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(_write_from_a_process, shared_redis.url, w, writers, root_id)
            for w in range(processes)
        ]
        results = [r for f in futures for r in f.result(timeout=120)]
    assert len(results) == processes * writers and all(results)

    async def check() -> int:
        store = open_store(store_settings(shared_redis.url, max_checkpoints=512))
        try:
            record = await store.load("t", "c")
            assert record is not None
            return len({c.id for c in record.checkpoints})
        finally:
            await store.aclose()

    assert asyncio.run(check()) == 1 + processes * writers


@pytest.mark.anyio
async def test_cancelled_calls_never_desynchronise_pooled_connections(
    shared_redis: RedisServer, redis_raw: Redis
) -> None:
    # Values of very different sizes, so cancellations land before, during and after replies.
    rng = random.Random(4)
    values = {
        f"key:{i}": bytes([i % 251]) * rng.choice([1, 100, 10_000, 200_000]) for i in range(64)
    }
    await redis_raw.mset(values)
    backend = RedisBackend.from_settings(
        store_settings(shared_redis.url, max_connections=3, operation_timeout_seconds=5)
    )
    try:
        for _ in range(30):
            tasks = [asyncio.create_task(backend.get(k)) for k in rng.sample(sorted(values), 12)]
            await asyncio.sleep(rng.uniform(0, 0.004))
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Every reply after the cancellations belongs to the request that asked for it.
            keys = rng.sample(sorted(values), 24)
            replies = await asyncio.gather(*(backend.get(k) for k in keys))
            assert [r == values[k] for k, r in zip(keys, replies, strict=True)] == [True] * 24
    finally:
        await backend.aclose()


@pytest.mark.anyio
async def test_store_timeouts_never_desynchronise_either(
    shared_redis: RedisServer, redis_raw: Redis
) -> None:
    # The store's own operation timeout cancels calls mid-flight too; with a tiny timeout most
    # calls time out; the ones that answer must still answer for their own conversation.
    writer = open_store(store_settings(shared_redis.url))
    tight = open_store(store_settings(shared_redis.url, operation_timeout_seconds=0.0005,
                                    max_connections=2, breaker_failures=10**6))  # fmt: skip
    try:
        big = [{"role": "user", "content": "x" * 100_000}] * 3
        for i in range(10):
            assert await writer.add_checkpoint("t", f"c{i}", checkpoint(big, 1 + i % 3))
        answered = 0
        for _ in range(20):
            records = await asyncio.gather(*(tight.load("t", f"c{i}") for i in range(10)))
            for i, record in enumerate(records):
                if record is not None:
                    answered += 1
                    assert record.conversation_id == f"c{i}"
        assert tight.counters.errors > 0
        for i in range(10):
            record = await writer.load("t", f"c{i}")
            assert record is not None and record.conversation_id == f"c{i}"
    finally:
        await writer.aclose()
        await tight.aclose()


async def seconds_until_ok(store: Any, limit: float = 5.0) -> float:
    """Poll the state the metrics layer reads until it is "ok"; the seconds waited, or inf."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if store.state().state == "ok":
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return float("inf")


@pytest.mark.anyio
async def test_redis_killed_and_restarted_during_a_stream_of_calls() -> None:
    skip_without_redis()
    server = RedisServer().start()
    store = open_store(
        store_settings(server.url, operation_timeout_seconds=0.1, breaker_cooldown_seconds=0.2)
    )
    outcomes: list[float] = []
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async def stream() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            started = time.monotonic()
            try:
                await store.load("t", "c")
                if i % 5 == 0:
                    await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 2 + i % 30))
                if i % 7 == 0 and (token := await store.acquire_lock("t", "c")):
                    await store.release_lock("t", "c", token)
            except BaseException as exc:  # the point of the test: nothing may escape
                errors.append(exc)
            outcomes.append(time.monotonic() - started)
            await asyncio.sleep(0.005)

    try:
        streams = [asyncio.create_task(stream()) for _ in range(4)]
        # On a busy machine one early call can exceed the 0.1 s bound and trip the breaker for
        # its 0.2 s cooldown; what matters is that the store is serving from Redis before the kill.
        assert await seconds_until_ok(store) < 3, "never reached ok before the kill"
        server.kill()
        await asyncio.sleep(1.0)
        assert store.state().state == "degraded"
        assert (await store.health()).state == "degraded"
        server.start()
        assert await seconds_until_ok(store) < 3, "did not recover"
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*streams)
        assert errors == []
        # Every call was answered within its bounds (a few trips of 0.1 s at the very worst).
        assert max(outcomes) < 2.5
        assert store.counters.errors > 0 and store.counters.fallbacks > 0
        with SyncRedis.from_url(server.url) as raw:
            assert raw.exists(store.tenancy.record_key("t", "c"))  # writes reach Redis again
    finally:
        stop.set()
        await store.aclose()
        server.close()


@pytest.mark.anyio
async def test_sentinel_url_reaches_the_master() -> None:
    skip_without_redis()
    with RedisServer() as master, RedisServer(sentinel_for=master.port) as sentinel:
        store = open_store(store_settings(f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"))
        try:
            assert await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 5))
            assert await store.load("t", "c") is not None
            assert (await store.health()).state == "ok"
            with SyncRedis.from_url(master.url) as raw:
                assert raw.exists(store.tenancy.record_key("t", "c"))
        finally:
            await store.aclose()


def _own_every_slot(url: str) -> None:
    with SyncRedis.from_url(url) as raw:
        raw.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        deadline = time.monotonic() + 10
        while b"cluster_state:ok" not in raw.execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "cluster did not become ok"
            time.sleep(0.05)


@pytest.mark.anyio
async def test_cluster_url_works_against_a_one_node_cluster() -> None:
    skip_without_redis()
    cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with RedisServer(*cluster, port=free_cluster_port()) as node:
        await asyncio.to_thread(_own_every_slot, node.url)
        store = open_store(store_settings(f"redis+cluster://127.0.0.1:{node.port}"))
        try:
            assert await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 5))
            assert await store.load("t", "c") is not None
            token = await store.acquire_lock("t", "c")
            assert token is not None and await store.release_lock("t", "c", token)
            assert [
                i.conversation_id for i in (await store.list_conversations("t")).conversations
            ] == ["c"]
        finally:
            await store.aclose()


def test_sentinel_url_parsing() -> None:
    assert parse_sentinel_url("redis+sentinel://h1:26380,h2,[::1]:26381/mymaster/2") == (
        SentinelTarget(
            sentinels=(("h1", 26380), ("h2", 26379), ("::1", 26381)), service_name="mymaster", db=2
        )
    )
    target = parse_sentinel_url(
        "redis+sentinel://user:p%40ss@h1:1/svc?sentinel_password=sp&ssl=true"
    )
    assert (target.username, target.password, target.sentinel_password, target.ssl) == (
        "user", "p@ss", "sp", True,
    )  # fmt: skip
    assert parse_sentinel_url("redis+sentinel://:pw@h1/svc").password == "pw"
    for bad in ("redis+sentinel://h1:26379", "redis+sentinel://h1:x/svc",
                "redis+sentinel:///svc", "redis+sentinel://h/svc/notadb"):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_sentinel_url(bad)


def test_cluster_url_parsing() -> None:
    assert parse_cluster_url("redis+cluster://n1:7000,n2:7001") == ClusterTarget(
        nodes=(("n1", 7000), ("n2", 7001))
    )
    target = parse_cluster_url("redis+cluster://:secret@n1?ssl=1")
    assert target == ClusterTarget(nodes=(("n1", 6379),), password="secret", ssl=True)
    with pytest.raises(ConfigError, match=r"\*\*\*"):
        parse_cluster_url("redis+cluster://:secret@n1:port")


def test_urls_are_redacted() -> None:
    assert redact_url("redis://:hunter2@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"
