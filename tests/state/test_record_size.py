"""store.max_record_bytes: the stored value of a conversation stays bounded, on
memory:// and redis:// alike: the oldest checkpoints give way; one that cannot fit alone is
refused, logged and counted, and what was stored stays."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from proxy.core.checkpoints import Checkpoint
from proxy.state.conversations import Store
from tests.support.stores import StoreFactory

pytestmark = pytest.mark.anyio


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
    return messages


def big_checkpoint(
    messages: list[dict[str, Any]], covered: int, size: int, parent: Checkpoint | None
) -> Checkpoint:
    return Checkpoint.create(
        messages,
        covered=covered,
        summary="s" * size,
        parent_id=parent.id if parent else None,
        summary_tokens=size // 4,
    )


async def stored_size(make_store: StoreFactory, store: Store) -> int:
    raw = await make_store.backend.get(store.tenancy.record_key("t", "c"))
    assert raw is not None
    return len(raw)


async def test_oldest_checkpoints_give_way_to_keep_the_record_small(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_record_bytes=10_000, max_checkpoints=8)
    messages = conversation(20)
    written: list[Checkpoint] = []
    for covered in range(3, 30, 3):  # nine checkpoints of 3 kB each: 27 kB unbounded
        cp = big_checkpoint(messages, covered, 3000, written[-1] if written else None)
        assert await store.add_checkpoint("t", "c", cp)
        written.append(cp)
    record = await store.load("t", "c")
    assert record is not None
    assert record.checkpoints == tuple(written[::-1][: len(record.checkpoints)])
    assert 1 <= len(record.checkpoints) <= 3
    assert await stored_size(make_store, store) <= 10_000


async def test_a_checkpoint_too_large_alone_is_refused_and_counted(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(max_record_bytes=10_000)
    messages = conversation(10)
    small = big_checkpoint(messages, 3, 100, None)
    assert await store.add_checkpoint("t", "c", small)
    with caplog.at_level(logging.WARNING):
        huge = big_checkpoint(messages, 9, 20_000, small)
        assert not await store.add_checkpoint("t", "c", huge)
    record = await store.load("t", "c")
    assert record is not None and record.checkpoints == (small,)
    assert store.counters.write_too_large == 1
    assert any("store.max_record_bytes" in r.getMessage() for r in caplog.records)
