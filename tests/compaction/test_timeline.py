"""A conversation's timeline as its ledger entry keeps it (proxy.compaction.money.books): bounded, and read defensively."""

from __future__ import annotations

from proxy.compaction.money.books import MAX_TURNS, TURNS_KEY, Turn, turns_of, with_turn


def turn(n: int, checkpoint: str | None = None) -> Turn:
    return Turn(at=1000.0 + n, messages=n, full_tokens=10 * n, sent_tokens=5 * n,
                billed_tokens=6 * n, cached_tokens=n, checkpoint=checkpoint)  # fmt: skip


def test_points_are_kept_in_order_beside_the_ledger_and_bounded() -> None:
    entry = {"v": 1, "requests": 3, "pace": {"tokens": 9}}
    for n in range(MAX_TURNS + 5):
        entry = with_turn(entry, turn(n, "cp" if n % 2 else None))
    kept = turns_of(entry)
    assert [t.messages for t in kept] == list(range(5, MAX_TURNS + 5))
    assert kept[-1] == turn(MAX_TURNS + 4) and kept[0] == turn(5, "cp")
    assert entry["requests"] == 3 and entry["pace"] == {"tokens": 9}  # the rest untouched
    assert kept[0].view()["sent_tokens"] == 25


def test_an_unreadable_point_is_left_out_and_a_missing_series_is_empty() -> None:
    good = with_turn({}, turn(1))[TURNS_KEY][0]
    broken = [
        "x",
        [1.0, 2, 3],
        [1.0, 2, 3, 4, 5, True, None],
        [1.0, 2, 3, 4, 5, 6, 7],
        ["t", 2, 3, 4, 5, 6, None],
    ]
    assert turns_of({TURNS_KEY: [*broken, good]}) == [turn(1)]
    assert turns_of(None) == turns_of({}) == turns_of({TURNS_KEY: "nope"}) == []
    assert turns_of(with_turn({TURNS_KEY: "nope"}, turn(2))) == [turn(2)]
