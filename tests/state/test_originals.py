"""What compaction removed, in the store (proxy.state.originals): found by handle only
in its own conversation and tenant, kept within a budget (oldest evicted first), sealed at rest,
forgotten with the conversation, and never a failure on the request path."""

from __future__ import annotations

import json

import pytest

from proxy.state.conversations import Store
from proxy.state.originals import UNAVAILABLE, Kept
from proxy.state.tenancy import Tenancy
from tests.support.stores import KEY_A, DownBackend, StoreFactory, store_settings

pytestmark = pytest.mark.anyio


async def test_a_handle_resolves_only_in_its_own_conversation_and_tenant(
    make_store: StoreFactory,
) -> None:
    one, two = make_store(), make_store()  # two replicas on one backend
    kept = await one.originals.keep("tenant-a", "conv", [("r1", "the original")], budget_bytes=1024)
    assert kept == Kept(added=1, evicted=0)
    assert await two.originals.find("tenant-a", "conv", "r1") == "the original"
    assert await two.originals.find("tenant-b", "conv", "r1") is None  # another tenant
    assert await two.originals.find("tenant-a", "other", "r1") is None  # another conversation
    assert await two.originals.find("tenant-a", "conv", "r2") is None
    # Kept again: nothing added, nothing written twice.
    assert await two.originals.keep("tenant-a", "conv", [("r1", "x")], budget_bytes=1024) == Kept(
        0, 0
    )
    assert await one.originals.find("tenant-a", "conv", "r1") == "the original"
    # Never listed as a conversation, and forgotten with one.
    assert (await one.list_conversations("tenant-a")).conversations == []
    await one.delete("tenant-a", "conv")
    assert await one.originals.find("tenant-a", "conv", "r1") is None


async def test_past_the_budget_the_oldest_are_evicted(make_store: StoreFactory) -> None:
    store = make_store()
    pieces = [(f"r{n}", str(n) * 400) for n in range(5)]  # 400 bytes each
    await store.originals.keep("t", "c", pieces[:3], budget_bytes=1000)
    assert await store.originals.find("t", "c", "r0") is None  # 1200 > 1000: the oldest went
    kept = await store.originals.keep("t", "c", pieces[3:], budget_bytes=1000)
    assert kept == Kept(added=2, evicted=2)
    found = [await store.originals.find("t", "c", h) for h, _ in pieces]
    assert [f is not None for f in found] == [False, False, False, True, True]


async def test_originals_are_sealed_at_rest() -> None:
    factory = StoreFactory("memory://")
    store = factory(encryption_keys=[KEY_A])
    await store.originals.keep("t", "c", [("r1", "secret file content")], budget_bytes=1024)
    raw = await factory.backend.get(store.tenancy.originals_key("t", "c"))
    assert raw is not None and b"secret file content" not in raw
    assert await store.originals.find("t", "c", "r1") == "secret file content"


async def test_a_failing_store_answers_none_and_unavailable() -> None:
    settings = store_settings("redis://unused")
    store = Store(DownBackend(), settings=settings, tenancy=Tenancy.from_settings(settings))
    assert await store.originals.keep("t", "c", [("r1", "x")], budget_bytes=1024) is None
    assert await store.originals.find("t", "c", "r1") is UNAVAILABLE


@pytest.mark.parametrize(
    "text", ["x" * 10_000, "é" * 10_000, "\x01" * 10_000], ids=["ascii", "two-byte", "escaped"]
)
async def test_a_piece_larger_than_half_the_budget_is_kept_cut_and_says_so(
    make_store: StoreFactory, text: str
) -> None:
    store = make_store()
    await store.originals.keep("t", "c", [("r0", "older"), ("r1", text)], budget_bytes=2048)
    kept = await store.originals.find("t", "c", "r1")
    assert isinstance(kept, str) and kept.startswith(text[:100])
    assert kept.endswith(f"of {len(text):,} characters; the rest is not kept]")
    # As the store holds it (JSON: an escaped character counts six bytes), within half.
    assert len(json.dumps(["r1", kept], separators=(",", ":"), ensure_ascii=False)) <= 1024
    assert await store.originals.find("t", "c", "r0") == "older"  # room left for others
