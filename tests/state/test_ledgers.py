"""A conversation's ledger entry in the store (proxy.state.ledgers): beside its record, bound to
its tenant, sealed, forgotten with the conversation, and never a failure on the request path."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import SecretStr

from proxy.errors import StoreError
from proxy.state.conversations import Store
from proxy.state.sealing import Sealer
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy
from tests.support.stores import KEY_A, DownBackend, StoreFactory, store_settings

pytestmark = pytest.mark.anyio


def count(entry: dict[str, Any] | None) -> dict[str, Any]:
    return {"requests": (entry or {}).get("requests", 0) + 1}


async def test_updates_add_up_per_tenant_and_conversation(make_store: StoreFactory) -> None:
    one, two = make_store(), make_store()  # two replicas on one backend
    for store in (one, two, one):
        await store.ledgers.update("tenant-a", "conv", count)
    assert await two.ledgers.inspect("tenant-a", "conv") == {"requests": 3}
    assert await one.ledgers.inspect("tenant-b", "conv") is None  # another caller sees nothing
    assert await one.ledgers.inspect("tenant-a", "other") is None
    # Never listed as a conversation, and forgotten with one.
    assert (await one.list_conversations("tenant-a")).conversations == []
    await one.delete("tenant-a", "conv")
    assert await one.ledgers.inspect("tenant-a", "conv") is None


async def test_an_entry_is_sealed_at_rest() -> None:
    backend = MemoryBackend()
    settings = store_settings("memory://", encryption_keys=[KEY_A])
    store = Store(
        backend,
        settings=settings,
        tenancy=Tenancy.from_settings(settings),
        sealer=Sealer.from_settings(settings.encryption_keys),
    )
    await store.ledgers.update("t", "c", lambda _: {"cached_tokens": 1536})
    key = store.tenancy.ledger_key("t", "c")
    raw = await backend.get(key)
    assert raw is not None and b"cached_tokens" not in raw
    assert await store.ledgers.inspect("t", "c") == {"cached_tokens": 1536}


async def test_a_sealed_entry_read_without_keys_is_absent_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = MemoryBackend()
    sealed = store_settings("memory://", encryption_keys=[KEY_A])
    tenancy = Tenancy.from_settings(sealed)
    keyed = Store(
        backend, settings=sealed, tenancy=tenancy, sealer=Sealer.from_settings([SecretStr(KEY_A)])
    )
    await keyed.ledgers.update("t", "c", count)
    plain = Store(backend, settings=store_settings("memory://"), tenancy=tenancy)
    with caplog.at_level("WARNING", logger="proxy.store.conversations"):
        assert await plain.ledgers.inspect("t", "c") is None
    assert "no encryption keys are configured" in caplog.text
    # Written again without keys: kept as it is, and read back.
    await plain.ledgers.update("t", "c", count)
    assert await plain.ledgers.inspect("t", "c") == {"requests": 1}
    raw = await backend.get(tenancy.ledger_key("t", "c"))
    assert raw is not None and b"requests" in raw


async def test_a_failing_store_answers_none_on_update_and_raises_for_the_admin() -> None:
    settings = store_settings("redis://unused")
    store = Store(DownBackend(), settings=settings, tenancy=Tenancy.from_settings(settings))
    assert await store.ledgers.update("t", "c", count) is None
    with pytest.raises(StoreError):  # the admin must know the store did not answer
        await store.ledgers.inspect("t", "c")


async def test_an_edit_sees_exactly_what_the_store_holds_whoever_wrote_it() -> None:
    """The process edits its own last write without decoding it again: each edit must still
    get exactly the entry the store's bytes decode to, through writes of another replica and
    with or without sealing."""
    rng = random.Random(7)
    seen: list[dict[str, Any] | None] = []  # what each edit was given

    def grow(entry: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(entry)
        turns = [*(entry or {}).get("turns", []), [rng.random(), rng.randint(0, 9), "é"]]
        return {**(entry or {}), "n": rng.randint(0, 10**9), "turns": turns[-5:]}

    for keys in ([], [KEY_A]):
        backend = MemoryBackend()
        settings = store_settings("memory://", encryption_keys=keys)
        tenancy = Tenancy.from_settings(settings)
        sealer = Sealer.from_settings([SecretStr(k) for k in keys])
        one, two = (
            Store(backend, settings=settings, tenancy=tenancy, sealer=sealer) for _ in range(2)
        )
        seen.clear()
        stored = None
        for _ in range(60):
            writer = one if rng.random() < 0.7 else two
            written = await writer.ledgers.update("t", "c", grow)
            assert seen[-1] == stored  # what the edit got: the store's entry, decoded
            stored = await one.ledgers.inspect("t", "c")
            assert written == stored
        assert len(seen) == 60
