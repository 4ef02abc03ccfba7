"""The behavioural suite of the conversation store, run against memory:// and redis:// alike."""

from __future__ import annotations

import asyncio
import logging

import pytest
from pydantic import SecretStr

from proxy.core.checkpoints import find_deepest
from tests.support.stores import KEY_A, KEY_B, StoreFactory, checkpoint, conversation

pytestmark = pytest.mark.anyio


async def test_miss_then_hit(make_store: StoreFactory) -> None:
    store = make_store()
    assert await store.load("t1", "conv") is None
    messages = conversation(4)
    cp = checkpoint(messages, 5)
    assert await store.add_checkpoint("t1", "conv", cp)
    record = await store.load("t1", "conv")
    assert record is not None
    assert record.checkpoints == (cp,)
    assert record.conversation_id == "conv"
    assert find_deepest(record, messages) == cp
    assert store.counters.hits == 1
    assert store.counters.misses == 1


async def test_a_second_replica_sees_the_checkpoint(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    messages = conversation(3)
    cp = checkpoint(messages, 3)
    assert await one.add_checkpoint("t", "c", cp)
    record = await two.load("t", "c")
    assert record is not None and record.checkpoints == (cp,)


async def test_only_extensions_are_written(make_store: StoreFactory) -> None:
    store = make_store()
    messages = conversation(6)
    root = checkpoint(messages, 5)
    assert await store.add_checkpoint("t", "c", root)
    child = checkpoint(messages, 9, parent=root)
    assert await store.add_checkpoint("t", "c", child)
    # A fork off root at depth 7: its parent is present, so it is kept beside the deeper child.
    fork = conversation(6, tag="-fork")[:3] + [{"role": "user", "content": "x"}] * 4
    fork[:5] = messages[:5]
    sibling = checkpoint(fork, 7, parent=root)
    assert await store.add_checkpoint("t", "c", sibling)
    # Shallower and without a stored parent: it extends nothing and is refused.
    stale = checkpoint(messages, 3)
    assert not await store.add_checkpoint("t", "c", stale)
    # Writing the same checkpoint again is an acknowledged no-op (a retry after a lost reply).
    assert await store.add_checkpoint("t", "c", child)
    record = await store.load("t", "c")
    assert record is not None
    assert [c.id for c in record.checkpoints] == [sibling.id, child.id, root.id]
    assert find_deepest(record, messages) == child
    assert find_deepest(record, fork) == sibling
    assert store.counters.write_rejected == 1


async def test_record_keeps_the_newest_checkpoints(make_store: StoreFactory) -> None:
    store = make_store(max_checkpoints=3)
    messages = conversation(10)
    written = []
    for covered in range(3, 18, 3):
        cp = checkpoint(messages, covered, parent=written[-1] if written else None)
        assert await store.add_checkpoint("t", "c", cp)
        written.append(cp)
    record = await store.load("t", "c")
    assert record is not None
    assert list(record.checkpoints) == written[::-1][:3]


async def test_concurrent_writers_lose_nothing(make_store: StoreFactory) -> None:
    stores = [make_store(max_checkpoints=64) for _ in range(4)]
    messages = conversation(30)
    root = checkpoint(messages, 3)
    assert await stores[0].add_checkpoint("t", "c", root)
    children = [checkpoint(messages, 3 + i, parent=root) for i in range(50)]
    results = await asyncio.gather(
        *(stores[i % 4].add_checkpoint("t", "c", cp) for i, cp in enumerate(children))
    )
    assert all(results)
    record = await stores[0].load("t", "c")
    assert record is not None
    assert {c.id for c in record.checkpoints} == {root.id, *(c.id for c in children)}


async def test_lock_single_holder_and_safe_release(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()
    token = await one.acquire_lock("t", "c")
    assert token is not None
    assert await two.acquire_lock("t", "c") is None
    assert await one.acquire_lock("t", "c") is None  # not re-entrant either
    # Another conversation, or the same id under another tenant, is another lock.
    assert await two.acquire_lock("t", "other") is not None
    assert await two.acquire_lock("t2", "c") is not None
    # A wrong token releases nothing.
    assert not await two.release_lock("t", "c", "r.not-the-token")
    assert await two.acquire_lock("t", "c") is None
    assert await one.release_lock("t", "c", token)
    assert not await one.release_lock("t", "c", token)  # twice is a no-op
    assert await two.acquire_lock("t", "c") is not None


async def test_lock_contention_has_one_winner(make_store: StoreFactory) -> None:
    # About locks, not resilience: a busy machine must not turn a slow first connection into a
    # store failure (which fails open, and then every caller "wins").
    stores = [make_store(operation_timeout_seconds=10) for _ in range(4)]
    tokens = await asyncio.gather(*(stores[i % 4].acquire_lock("t", "c") for i in range(40)))
    assert sum(t is not None for t in tokens) == 1


async def test_lock_expires(make_store: StoreFactory) -> None:
    one, two = make_store(lock_ttl_seconds=0.2), make_store(lock_ttl_seconds=0.2)
    stale = await one.acquire_lock("t", "c")
    assert stale is not None
    await asyncio.sleep(0.3)
    fresh = await two.acquire_lock("t", "c")
    assert fresh is not None
    # The expired holder finishing late must not release the new holder's lock.
    assert not await one.release_lock("t", "c", stale)
    assert await one.acquire_lock("t", "c") is None


async def test_records_expire_and_use_refreshes_them(make_store: StoreFactory) -> None:
    store = make_store(ttl_seconds=1)
    messages = conversation(3)
    assert await store.add_checkpoint("t", "used", checkpoint(messages, 3))
    assert await store.add_checkpoint("t", "idle", checkpoint(messages, 3))
    for _ in range(4):
        await asyncio.sleep(0.35)
        assert await store.load("t", "used") is not None  # each read pushes the expiry back
    assert await store.load("t", "idle") is None


async def test_tenants_see_nothing_of_each_other(make_store: StoreFactory) -> None:
    store = make_store()
    alice, bob = store.tenancy.tenant("sk-alice"), store.tenancy.tenant("sk-bob")
    assert alice != bob
    messages = conversation(3)
    assert await store.add_checkpoint(alice, "shared-id", checkpoint(messages, 3))
    assert await store.load(bob, "shared-id") is None
    assert await store.inspect(bob, "shared-id") is None
    assert (await store.list_conversations(bob)).conversations == []
    assert not await store.delete(bob, "shared-id")
    assert await store.load(alice, "shared-id") is not None


async def test_encrypted_records_survive_key_rotation(make_store: StoreFactory) -> None:
    before = make_store(encryption_keys=(SecretStr(KEY_A),))
    messages = conversation(3)
    cp = checkpoint(messages, 3)
    assert await before.add_checkpoint("t", "c", cp)
    key = before.tenancy.record_key("t", "c")
    raw = await make_store.backend.get(key)
    assert raw is not None and b"summary of" not in raw  # nothing readable at rest
    # Rotation: B now seals, A still opens what was written before.
    after = make_store(encryption_keys=(SecretStr(KEY_B), SecretStr(KEY_A)))
    record = await after.load("t", "c")
    assert record is not None and record.checkpoints == (cp,)
    child = checkpoint(messages, 5, parent=cp)
    assert await after.add_checkpoint("t", "c", child)
    # Once A is retired, what B sealed stays readable.
    retired = make_store(encryption_keys=(SecretStr(KEY_B),))
    record = await retired.load("t", "c")
    assert record is not None and record.checkpoints[0] == child
    # A store without B (or without any key) sees nothing.
    assert await make_store(encryption_keys=(SecretStr(KEY_A),)).load("t", "c") is None
    plain = make_store()
    assert await plain.load("t", "c") is None
    assert plain.counters.invalid_values == 1


async def test_tampered_values_are_absent(make_store: StoreFactory) -> None:
    store = make_store(encryption_keys=(SecretStr(KEY_A),))
    assert await store.add_checkpoint("t", "c", checkpoint(conversation(3), 3))
    await _flip_a_byte(make_store, store.tenancy.record_key("t", "c"))
    assert await store.load("t", "c") is None
    assert store.counters.invalid_values == 1
    # A tampered record is replaced by the next write instead of blocking the conversation.
    assert await store.add_checkpoint("t", "c", checkpoint(conversation(3), 3))
    assert await store.load("t", "c") is not None


async def _flip_a_byte(make_store: StoreFactory, key: str) -> None:
    raw = await make_store.backend.get(key)
    assert raw is not None
    flipped = raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:]
    assert await make_store.backend.compare_and_set(key, raw, flipped, ttl_ms=60_000)


async def test_garbage_values_are_absent(make_store: StoreFactory) -> None:
    store = make_store()
    key = store.tenancy.record_key("t", "c")
    assert await make_store.backend.compare_and_set(key, None, b"{not json", ttl_ms=60_000)
    assert await store.load("t", "c") is None
    assert store.counters.invalid_values == 1


async def test_a_value_moved_to_another_key_does_not_open(make_store: StoreFactory) -> None:
    store = make_store(encryption_keys=(SecretStr(KEY_A),))
    assert await store.add_checkpoint("victim", "c", checkpoint(conversation(3), 3))
    raw = await make_store.backend.get(store.tenancy.record_key("victim", "c"))
    assert raw is not None
    target = store.tenancy.record_key("attacker", "c")
    assert await make_store.backend.compare_and_set(target, None, raw, ttl_ms=60_000)
    assert await store.load("attacker", "c") is None
    assert store.counters.invalid_values == 1


async def test_owner_mismatch_is_a_miss_and_a_security_event(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store()  # unencrypted: only the owner fingerprint stands in the way
    assert await store.add_checkpoint("victim", "c", checkpoint(conversation(3), 3))
    raw = await make_store.backend.get(store.tenancy.record_key("victim", "c"))
    assert raw is not None
    target = store.tenancy.record_key("attacker", "c")
    assert await make_store.backend.compare_and_set(target, None, raw, ttl_ms=60_000)
    with caplog.at_level(logging.WARNING, logger="proxy.security"):
        assert await store.load("attacker", "c") is None
    assert store.counters.owner_mismatches == 1
    assert any(r.name == "proxy.security" for r in caplog.records)


async def test_admin_inspect_list_delete(make_store: StoreFactory) -> None:
    store = make_store()
    messages = conversation(3)
    for name in ("one", "two"):
        assert await store.add_checkpoint("t", name, checkpoint(messages, 3))
    assert await store.add_checkpoint("other", "three", checkpoint(messages, 3))
    infos = (await store.list_conversations("t")).conversations
    assert sorted(i.conversation_id for i in infos) == ["one", "two"]
    assert all(i.covered == 3 and i.ttl_seconds and i.ttl_seconds > 0 for i in infos)
    record = await store.inspect("t", "one")
    assert record is not None and record.checkpoints[0].summary == "summary of 3"
    assert await store.delete("t", "one")
    assert await store.load("t", "one") is None
    assert not await store.delete("t", "one")
    assert [i.conversation_id for i in (await store.list_conversations("t")).conversations] == [
        "two"
    ]


async def test_health_is_ok(make_store: StoreFactory) -> None:
    store = make_store()
    health = await store.health()
    assert health.state == "ok" and health.reason is None


async def test_a_record_read_again_is_what_a_fresh_store_reads(make_store: StoreFactory) -> None:
    """The reader keeps the records it decoded: each read is still the stored record (another
    replica's writes, a tampered value, a delete), as a store that never read it before sees."""
    reader = make_store(encryption_keys=(SecretStr(KEY_A),))
    writer = make_store(encryption_keys=(SecretStr(KEY_A),))
    messages = conversation(12)
    parent = None
    for covered in (3, 5, 5, 9, 11):
        cp = checkpoint(messages, covered, parent=parent)
        assert await writer.add_checkpoint("t", "c", cp)
        parent = cp
        for _ in range(2):
            fresh = await make_store(encryption_keys=(SecretStr(KEY_A),)).load("t", "c")
            assert await reader.load("t", "c") == fresh
            assert fresh is not None and fresh.checkpoints[0] == cp
    assert await reader.load("u", "c") is None  # another tenant's key: nothing of "t"'s
    await _flip_a_byte(make_store, reader.tenancy.record_key("t", "c"))
    assert await reader.load("t", "c") is None
    assert await writer.delete("t", "c")
    assert await reader.load("t", "c") is None
