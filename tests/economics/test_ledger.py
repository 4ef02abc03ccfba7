"""A conversation's ledger, checked against hand-computed dollars."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from proxy.economics.ledger import (
    LEDGER_VERSION,
    Ledger,
    add_request,
    add_summary,
    counterfactual_cost,
)
from proxy.economics.prices import UNPRICED, PriceTable
from proxy.economics.usage import BilledUsage

TABLE = PriceTable()
GPT41 = TABLE.price("gpt-4.1")  # 2.00 in, 0.50 cached, 2.00 write, 8.00 out
MINI = TABLE.price("gpt-4o-mini")  # 0.15, 0.075, 0.15, 0.60
SONNET = TABLE.price("claude-sonnet-4-5")  # 3.00, 0.30, 3.75, 15.00


def run() -> Ledger:
    """Two turns sent as the client sent them, a summary, three compacted turns."""
    ledger = Ledger()
    # 1: forwarded unchanged: the direct run's own bill. 10000*2 + 500*8 = 24000 -> $0.024
    ledger = add_request(
        ledger, BilledUsage(10_000, 0, 0, 500), GPT41, full_prompt_tokens=10_000, warm=True
    )
    # 2: unchanged, 9984 read from the cache: 2016*2 + 9984*0.5 + 400*8 = 12224 -> $0.012224
    ledger = add_request(
        ledger, BilledUsage(2_016, 9_984, 0, 400), GPT41, full_prompt_tokens=12_000, warm=True
    )
    # the summary, on gpt-4o-mini: 11000*0.15 + 800*0.6 = 2130 -> $0.00213
    ledger = add_summary(ledger, BilledUsage(11_000, 0, 0, 800), MINI)
    # 3: compacted to 5000 (a new prefix, nothing cached): 5000*2 + 300*8 = 12400 -> $0.0124
    #    direct, warm: 12000 read + 8000 new: 12000*0.5 + 8000*2 + 300*8 = 24400 -> $0.0244
    ledger = add_request(
        ledger, BilledUsage(5_000, 0, 0, 300), GPT41, full_prompt_tokens=20_000, warm=True
    )
    # 4: compacted 7000, 4992 cached: 2008*2 + 4992*0.5 + 200*8 = 8112 -> $0.008112
    #    direct: 20000*0.5 + 2000*2 + 200*8 = 15600 -> $0.0156
    ledger = add_request(
        ledger, BilledUsage(2_008, 4_992, 0, 200), GPT41, full_prompt_tokens=22_000, warm=True
    )
    # 5: after a pause (cold): 8000*2 + 100*8 = 16800 -> $0.0168; direct 23000*2 + 800 -> $0.0468
    return add_request(
        ledger, BilledUsage(8_000, 0, 0, 100), GPT41, full_prompt_tokens=23_000, warm=False
    )


def test_dollars_spent_counterfactual_and_saved() -> None:
    ledger = run()
    assert ledger.spent == pytest.approx(0.024 + 0.012224 + 0.0124 + 0.008112 + 0.0168)
    assert ledger.summarizer_spent == pytest.approx(0.00213)
    assert ledger.total_spent == pytest.approx(0.073536 + 0.00213)
    assert ledger.counterfactual == pytest.approx(0.024 + 0.012224 + 0.0244 + 0.0156 + 0.0468)
    assert ledger.saved == pytest.approx(0.123024 - 0.073536 - 0.00213)


def test_tokens() -> None:
    ledger = run()
    assert (ledger.requests, ledger.summaries, ledger.unpriced) == (5, 1, 0)
    assert ledger.prompt_tokens == 10_000 + 12_000 + 5_000 + 7_000 + 8_000
    assert ledger.cached_tokens == 9_984 + 4_992
    assert ledger.cache_write_tokens == 0
    assert ledger.output_tokens == 1_500
    assert (ledger.summarizer_input_tokens, ledger.summarizer_output_tokens) == (11_000, 800)
    assert ledger.full_prompt_tokens == 10_000 + 12_000 + 20_000 + 22_000 + 23_000
    assert ledger.last_full_tokens == 23_000


def test_a_summary_never_used_is_a_net_loss() -> None:
    # An ahead-of-time summary, then the conversation ends: its cost was spent for nothing.
    ledger = add_request(
        Ledger(), BilledUsage(1_000, 0, 0, 10), GPT41, full_prompt_tokens=1_000, warm=False
    )
    ledger = add_summary(ledger, BilledUsage(900, 0, 0, 100), GPT41)
    assert ledger.saved == pytest.approx(-(900 * 2 + 100 * 8) / 1e6)


def test_anthropic_counterfactual_writes_the_new_tail() -> None:
    # 30000 read at 0.30, the 2000 new tokens written at 3.75, 100 out at 15: 18000 -> $0.018
    assert counterfactual_cost(
        SONNET, full_prompt_tokens=32_000, previous_full_tokens=30_000, output_tokens=100, warm=True
    ) == pytest.approx(0.018)
    # cold: all 32000 written: 32000*3.75 + 1500 = 121500 -> $0.1215
    assert counterfactual_cost(
        SONNET,
        full_prompt_tokens=32_000,
        previous_full_tokens=30_000,
        output_tokens=100,
        warm=False,
    ) == pytest.approx(0.1215)
    # a history the client shortened: only what is left can be a prefix
    assert counterfactual_cost(
        SONNET, full_prompt_tokens=10_000, previous_full_tokens=30_000, output_tokens=0, warm=True
    ) == pytest.approx(10_000 * 0.30 / 1e6)


def test_cache_writes_are_priced_and_counted() -> None:
    usage = BilledUsage(input_uncached=40, cached_read=30_000, cache_write=2_000, output=500)
    ledger = add_request(Ledger(), usage, SONNET, full_prompt_tokens=32_040, warm=True)
    # 40*3 + 30000*0.3 + 2000*3.75 + 500*15 = 120 + 9000 + 7500 + 7500 = 24120
    assert ledger.spent == pytest.approx(0.02412) == ledger.counterfactual
    assert (ledger.cached_tokens, ledger.cache_write_tokens) == (30_000, 2_000)


def test_an_unpriced_model_counts_tokens_and_flags_it() -> None:
    ledger = add_request(
        Ledger(), BilledUsage(100, 0, 0, 10), UNPRICED, full_prompt_tokens=500, warm=True
    )
    ledger = add_summary(ledger, BilledUsage(100, 0, 0, 10), UNPRICED)
    assert (ledger.unpriced, ledger.prompt_tokens, ledger.spent, ledger.saved) == (2, 100, 0.0, 0.0)


def test_round_trip_through_a_json_dict() -> None:
    ledger = run()
    stored = json.loads(json.dumps(ledger.to_dict()))
    assert stored == {"v": LEDGER_VERSION, **asdict(ledger)}
    assert Ledger.from_dict(stored) == ledger


def test_reading_old_new_and_broken_dicts() -> None:
    assert Ledger.from_dict({}) == Ledger()
    assert Ledger.from_dict({"v": 1, "requests": 3}) == Ledger(requests=3)
    assert Ledger.from_dict({"v": 99, "requests": 3}) == Ledger()
    assert Ledger.from_dict({"spent": 1}).spent == 1.0
    for broken in ({"requests": "3"}, {"requests": 1.5}, {"requests": True}, {"spent": None}):
        with pytest.raises(ValueError):
            Ledger.from_dict(broken)


def test_a_request_keeps_every_total_it_does_not_add_to() -> None:
    """The summarizer's totals (and any field added later) survive a request's update."""
    ledger = Ledger(**{name: i + 1 for i, name in enumerate(asdict(Ledger()))})
    after = add_request(
        ledger, BilledUsage(1_000, 0, 0, 10), GPT41, full_prompt_tokens=1_000, warm=False
    )
    counted = {
        "requests",
        "prompt_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "output_tokens",
        "unpriced",
        "spent",
        "counterfactual",
        "full_prompt_tokens",
        "last_full_tokens",
    }
    kept = {k: v for k, v in asdict(after).items() if k not in counted}
    assert kept == {k: v for k, v in asdict(ledger).items() if k not in counted}
    assert set(kept) == {
        "summaries",
        "summarizer_input_tokens",
        "summarizer_output_tokens",
        "summarizer_spent",
    }
