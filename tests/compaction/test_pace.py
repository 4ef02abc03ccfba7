"""The pace record (proxy.compaction.money.pace): growth measured per growing request, read fail-open."""

from __future__ import annotations

from dataclasses import asdict

from proxy.compaction.money.pace import PACE_KEY, Pace


def test_growth_is_the_mean_of_what_each_growing_request_added() -> None:
    pace = Pace().grown_to(1000)
    assert pace.growth_per_turn is None  # one request: nothing measured
    pace = pace.grown_to(1200)
    assert pace.growth_per_turn is None  # one sample: not trusted yet
    pace = pace.grown_to(1600)
    assert pace.growth_per_turn == 300
    assert pace.tokens == 1600


def test_a_retry_an_edit_or_a_fork_is_no_sample() -> None:
    pace = Pace().grown_to(1000).grown_to(1100).grown_to(1300)
    assert pace.grown_to(1300) == pace  # a retry
    shorter = pace.grown_to(900)  # an edit or a fork: a new base, the growth kept
    assert (shorter.tokens, shorter.samples, shorter.growth) == (900, 2, 150)
    assert shorter.grown_to(1050).growth_per_turn == 150


def test_the_record_round_trips_and_reads_anything_else_as_unknown() -> None:
    pace = Pace(1300, 2, 150.0, "ck-1", 2, "default", at=1234.5)
    assert Pace.from_entry({PACE_KEY: asdict(pace), "requests": 3}) == pace
    assert pace.to_dict() == asdict(pace)  # what the ledger entry stores after each answer
    assert Pace.from_entry({PACE_KEY: pace.to_dict()}) == pace
    for entry in (None, {}, {PACE_KEY: "x"}, {PACE_KEY: {"tokens": "many"}}):
        assert Pace.from_entry(entry) == Pace()  # type: ignore[arg-type]
