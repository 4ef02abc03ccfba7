"""The books an answer reads from the entry this process wrote last (``KnownEntries``): the
ledger and the pace are not read out of the entry again, and what the store holds is exactly
what reading them afresh writes, whatever else changed the entry in between."""

from __future__ import annotations

import asyncio
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.compaction.money import books
from proxy.compaction.money.books import KnownEntries, PaceSample
from proxy.compaction.money.spending import Spending
from proxy.config.settings import parse_settings
from proxy.economics.ledger import Ledger
from proxy.economics.prices import PriceTable
from proxy.economics.usage import BilledUsage
from proxy.events import Listeners
from proxy.state.conversations import Store
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy

SETTINGS = parse_settings(
    'pricing:\n  models: {"gpt-4o": {input: 2.0, cached_input: 0.5, output: 8.0}}\n', environ={}
)
SECRET = b"known-books-secret-0123456789abcdef"
CONV: Any = SimpleNamespace(
    tenant="t", conversation_id="c1", model="gpt-4o", policy_name="default", route="chat"
)
USAGE = BilledUsage(input_uncached=388, cached_read=512, cache_write=0, output=10)


def plan(tokens_before: int) -> Any:
    return SimpleNamespace(
        tokens_before=tokens_before,
        tokens_after=1000,
        source=[None] * 9,
        applied_checkpoint="ck",
        changed=True,
    )


def spending(backend: MemoryBackend, *, known: bool = True) -> tuple[Spending, Store]:
    store = Store(backend, settings=SETTINGS.store, tenancy=Tenancy(SECRET))
    ticks = iter(range(1000, 2000))
    made = Spending(
        prices=PriceTable(SETTINGS.pricing),
        ledgers=store.ledgers,
        listeners=Listeners(),
        clock=lambda: float(next(ticks)),
    )
    if not known:
        made._known = KnownEntries(max_entries=0)  # every entry read afresh
    return made, store


async def stored(backend: MemoryBackend, store: Store) -> bytes | None:
    return await backend.get(store.tenancy.ledger_key("t", "c1"))


async def steps(made: Spending, store: Store, backend: MemoryBackend) -> list[bytes | None]:
    """A conversation's answers (priced, paced, both), a summary between them: the bytes
    stored after each."""
    out = []
    for n, (usage, paced) in enumerate(
        [(USAGE, True), (USAGE, True), (None, True), (USAGE, False), (USAGE, True)]
    ):
        pace = PaceSample(5000 + 700 * n, "ck" if n == 2 else None, "default") if paced else None
        made.answered(CONV, plan(5000 + 700 * n), usage, pace=pace)
        await made.join()
        out.append(await stored(backend, store))
        if n == 1:
            made.summary_made(CONV, "gpt-4o", USAGE)
            await made.join()
            out.append(await stored(backend, store))
    return out


def test_the_entries_written_are_those_read_afresh_would_write() -> None:
    async def run(known: bool) -> list[bytes | None]:
        backend = MemoryBackend()
        made, store = spending(backend, known=known)
        return await steps(made, store, backend)

    kept, afresh = asyncio.run(run(True)), asyncio.run(run(False))
    assert kept == afresh
    assert all(kept) and len(set(kept)) == len(kept)


def test_an_answer_reads_the_entry_it_wrote_last_without_reading_it_out_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    from_dict, from_entry = Ledger.from_dict.__func__, books.Pace.from_entry.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        Ledger, "from_dict", classmethod(lambda cls, d: reads.append("ledger") or from_dict(cls, d))
    )
    monkeypatch.setattr(
        books.Pace,
        "from_entry",
        classmethod(lambda cls, e: reads.append("pace") or from_entry(cls, e)),
    )

    async def run() -> None:
        made, _ = spending(MemoryBackend())
        for n in range(3):
            made.answered(CONV, plan(5000 + n), USAGE, pace=PaceSample(5000 + n, None, "d"))
            await made.join()

    asyncio.run(run())
    assert reads == ["pace"]  # the first answer's, of no entry; then each the one before wrote


def test_an_entry_another_process_changed_is_read_afresh() -> None:
    """Two replicas answer turns of one conversation in turn: each sees the other's writes."""

    async def run() -> tuple[dict[str, Any] | None, int]:
        backend = MemoryBackend()
        one, store = spending(backend)
        other, _ = spending(backend)
        for n, made in enumerate([one, other, one, one, other]):
            made.answered(CONV, plan(5000 + n), USAGE, pace=PaceSample(5000 + n, None, "d"))
            await made.join()
        return await store.ledgers.inspect("t", "c1"), 5

    entry, answers = asyncio.run(run())
    assert entry is not None
    assert entry["requests"] == answers
    assert entry["prompt_tokens"] == 900 * answers
    assert entry["pace"]["samples"] == answers - 1
    assert len(entry["turns"]) == answers


def test_known_entries_stay_bounded_and_know_an_entry_by_its_identity() -> None:
    known = KnownEntries(max_entries=2)
    entries = [{"n": n} for n in range(3)]
    for n, entry in enumerate(entries):
        known.remember(entry, books.Known(None, books.Pace(tokens=n)))
    assert known.of(entries[0]).pace is None  # pushed out by the newer two
    assert known.of(entries[2]).pace == books.Pace(tokens=2)
    assert known.of({"n": 2}).pace is None  # an equal entry is not the one it knows
    assert known.of(None).pace is None


def test_the_stored_forms_hold_every_field_in_its_order() -> None:
    """The ledger, the pace and a timeline point are written field by field: a field added to
    one of them is written too, where the records have it."""
    ledger = Ledger(*range(1, 15))
    assert list(ledger.to_dict()) == ["v", *(f.name for f in fields(Ledger))]
    assert list(ledger.to_dict().values())[1:] == [getattr(ledger, f.name) for f in fields(Ledger)]
    assert Ledger.from_dict(ledger.to_dict()) == ledger
    pace = books.Pace(1, 2, 3.0, "ck", 4, "p", 5.0)
    assert pace.to_dict() == {f.name: getattr(pace, f.name) for f in fields(books.Pace)}
    assert list(pace.to_dict()) == [f.name for f in fields(books.Pace)]
    turn = books.Turn(1.0, 2, 3, 4, 5, 6, "ck")
    assert turn.point() == [getattr(turn, f.name) for f in fields(books.Turn)]


def test_the_timeline_keeps_its_newest_points() -> None:
    entry: dict[str, Any] = {}
    for n in range(books.MAX_TURNS + 5):
        entry = books.with_turn(entry, books.Turn(float(n), n, 0, 0, 0, 0, None))
    assert [point[0] for point in entry["turns"]] == [
        float(n) for n in range(5, books.MAX_TURNS + 5)
    ]
