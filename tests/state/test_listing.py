"""The admin listing's index and operator edits of a record, on memory:// and redis:// alike."""

from __future__ import annotations

import pytest

from proxy.core import history
from proxy.core.checkpoints import find_deepest
from proxy.errors import PayloadTooLarge
from proxy.state import conversations
from tests.support.stores import StoreFactory, checkpoint, conversation

pytestmark = pytest.mark.anyio

MESSAGES = conversation(6)


async def names(store, tenant: str, **kwargs) -> list[str]:
    page = await store.list_conversations(tenant, **kwargs)
    return [info.conversation_id for info in page.conversations]


async def test_listing_is_newest_use_first_and_pages(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conversations, "TOUCH_SECONDS", 0.0)  # every read moves it
    store = make_store()
    for name in ("a", "b", "c", "d", "e"):
        assert await store.add_checkpoint("t", name, checkpoint(MESSAGES, 3))
    assert await store.load("t", "b") is not None  # a request used b: it moves to the front
    assert await names(store, "t") == ["b", "e", "d", "c", "a"]

    first = await store.list_conversations("t", limit=2)
    assert [i.conversation_id for i in first.conversations] == ["b", "e"]
    second = await store.list_conversations("t", limit=2, before=first.next_before)
    third = await store.list_conversations("t", limit=2, before=second.next_before)
    assert [i.conversation_id for i in second.conversations] == ["d", "c"]
    assert [i.conversation_id for i in third.conversations] == ["a"]
    assert third.next_before is None

    info = first.conversations[0]
    assert info.checkpoints == 1 and info.covered == 3 and info.bytes > 100
    assert info.last_used >= info.updated_at > 0
    # A load of a conversation never written adds nothing; another tenant sees none of these.
    assert await store.load("t", "never-written") is None
    assert "never-written" not in await names(store, "t")
    assert await names(store, "u") == []


async def test_listing_is_bounded_and_forgets_deleted_and_expired(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_listed_conversations=3)
    for name in ("a", "b", "c", "d"):
        assert await store.add_checkpoint("t", name, checkpoint(MESSAGES, 3))
    assert await names(store, "t") == ["d", "c", "b"]  # a dropped out of the listing...
    assert await store.load("t", "a") is not None  # ...not out of the store
    assert await store.delete("t", "c")
    assert await names(store, "t") == ["d", "b"]
    # A record gone under the index (expired, evicted) is left out, and pruned from the index.
    await make_store.backend.delete(store.tenancy.record_key("t", "d"))
    assert await names(store, "t") == ["b"]
    assert [m for m, _ in await make_store.backend.index_page(
        store.tenancy.index_key("t"), before=None, limit=10
    )] == [store.tenancy.record_key("t", "b")]  # fmt: skip


async def test_a_correction_becomes_current_and_keeps_the_history(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_checkpoints=8)
    first = checkpoint(MESSAGES, 5)
    deeper = checkpoint(MESSAGES, 9, parent=first)
    for cp in (first, deeper):
        assert await store.add_checkpoint("t", "c", cp)

    def fix(record):
        target = history.current(record)
        assert target == deeper
        fixed = history.corrected(target, "the right summary", summary_tokens=4, created_at=1.0)
        return history.correct(record, target.id, fixed, now=2.0, max_checkpoints=8)

    written = await store.change("t", "c", fix)
    assert written is not None and written.conversation_id == "c"
    loaded = await make_store().load("t", "c")  # another replica
    assert loaded is not None and [c.summary for c in loaded.checkpoints] == [
        "the right summary", "summary of 9", "summary of 5"
    ]  # fmt: skip
    applied = find_deepest(loaded, MESSAGES)
    assert applied is not None and applied.summary == "the right summary"
    assert (applied.covered, applied.chain, applied.parent_id) == (9, deeper.chain, deeper.id)

    # Restoring the first retires what extends it (the deeper one and its correction).
    assert await store.change("t", "c", lambda r: history.restore(r, first.id))
    loaded = await store.load("t", "c")
    assert loaded is not None and find_deepest(loaded, MESSAGES) == first
    assert loaded.retired == {deeper.id, applied.id}
    # A late summary extending a retired checkpoint is refused; one extending the first is not.
    assert not await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 11, parent=deeper))
    assert await store.add_checkpoint("t", "c", again := checkpoint(MESSAGES, 7, parent=first))
    loaded = await store.load("t", "c")
    assert loaded is not None and find_deepest(loaded, MESSAGES) == again
    assert loaded.retired == {deeper.id, applied.id}  # kept across ordinary writes


async def test_change_of_nothing_and_of_too_much(make_store: StoreFactory) -> None:
    store = make_store(max_record_bytes=4096)
    assert await store.change("t", "missing", lambda r: r) is None
    base = checkpoint(MESSAGES, 5)
    assert await store.add_checkpoint("t", "c", base)

    def huge(record):
        fixed = history.corrected(base, "x" * 8000, summary_tokens=1, created_at=1.0)
        return history.correct(record, base.id, fixed, now=1.0, max_checkpoints=8)

    with pytest.raises(PayloadTooLarge):
        await store.change("t", "c", huge)
    loaded = await store.load("t", "c")
    assert loaded is not None and loaded.checkpoints == (base,)  # nothing changed


async def test_a_summary_of_the_text_an_operator_replaced_is_refused(
    make_store: StoreFactory,
) -> None:
    """A background summary extending the current checkpoint was in flight while an operator
    corrected it: it was made from the old text and must not bury the correction."""
    store = make_store()
    base = checkpoint(MESSAGES, 5)
    assert await store.add_checkpoint("t", "c", base)
    in_flight = checkpoint(MESSAGES, 9, parent=base)  # planned before the correction

    def fix(record):
        fixed = history.corrected(base, "corrected", summary_tokens=1, created_at=1.0)
        return history.correct(record, base.id, fixed, now=1.0, max_checkpoints=8)

    assert await store.change("t", "c", fix)
    assert not await store.add_checkpoint("t", "c", in_flight)
    loaded = await store.load("t", "c")
    assert loaded is not None
    applied = find_deepest(loaded, MESSAGES)
    assert applied is not None and applied.summary == "corrected"
    # Extending the correction is what a summary does next.
    assert await store.add_checkpoint("t", "c", checkpoint(MESSAGES, 9, parent=applied))


async def test_a_read_moves_the_listing_at_most_once_a_minute(make_store: StoreFactory) -> None:
    store = make_store()
    for name in ("a", "b"):
        assert await store.add_checkpoint("t", name, checkpoint(MESSAGES, 3))
    assert await store.load("t", "a") is not None  # written just now: not moved again
    assert await names(store, "t") == ["b", "a"]
    other = make_store()  # another replica has not moved it: it does
    assert await other.load("t", "a") is not None
    assert await names(store, "t") == ["a", "b"]
