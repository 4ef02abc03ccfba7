"""Prices by model name: built-in families, dated snapshots, the user's overrides, the default."""

from __future__ import annotations

import logging

import pytest

from proxy.config.pricing import ModelPrice, PricingSettings
from proxy.economics.prices import BUILTIN_PRICES, READ_ON, UNPRICED, Price, PriceTable
from proxy.economics.usage import BilledUsage


def rates(price: Price) -> tuple[float, float, float, float]:
    return (price.input, price.cached_input, price.cache_write, price.output)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # OpenAI: no write fee (cache_write == input)
        ("gpt-4.1", (2.00, 0.50, 2.00, 8.00)),
        ("gpt-4.1-2025-04-14", (2.00, 0.50, 2.00, 8.00)),
        ("gpt-4.1-mini", (0.40, 0.10, 0.40, 1.60)),
        ("gpt-4.1-mini-2025-04-14", (0.40, 0.10, 0.40, 1.60)),
        ("gpt-4o", (2.50, 1.25, 2.50, 10.00)),
        ("gpt-4o-2024-08-06", (2.50, 1.25, 2.50, 10.00)),
        ("gpt-4o-mini", (0.15, 0.075, 0.15, 0.60)),
        ("gpt-4o-mini-2024-07-18", (0.15, 0.075, 0.15, 0.60)),
        ("gpt-5", (1.25, 0.125, 1.25, 10.00)),
        ("gpt-5-2025-08-07", (1.25, 0.125, 1.25, 10.00)),
        ("gpt-5-codex", (1.25, 0.125, 1.25, 10.00)),
        ("gpt-5-mini", (0.25, 0.025, 0.25, 2.00)),
        ("gpt-5-nano-2025-08-07", (0.05, 0.005, 0.05, 0.40)),
        ("gpt-5-pro", (15.00, 15.00, 15.00, 120.00)),
        ("gpt-5.1", (1.25, 0.125, 1.25, 10.00)),
        ("gpt-5.4", (2.50, 0.25, 2.50, 15.00)),
        ("gpt-5.4-mini", (0.75, 0.075, 0.75, 4.50)),
        ("o1", (15.00, 7.50, 15.00, 60.00)),
        ("o3", (2.00, 0.50, 2.00, 8.00)),
        ("o3-2025-04-16", (2.00, 0.50, 2.00, 8.00)),
        ("o3-mini", (1.10, 0.55, 1.10, 4.40)),
        ("o4-mini", (1.10, 0.275, 1.10, 4.40)),
        # Anthropic: writes at 1.25x, reads at 0.1x of input
        ("claude-sonnet-4-5-20250929", (3.00, 0.30, 3.75, 15.00)),
        ("claude-sonnet-4-20250514", (3.00, 0.30, 3.75, 15.00)),
        ("claude-sonnet-4-6", (3.00, 0.30, 3.75, 15.00)),
        ("claude-opus-4-1-20250805", (15.00, 1.50, 18.75, 75.00)),
        ("claude-opus-4-20250514", (15.00, 1.50, 18.75, 75.00)),
        ("claude-opus-4-5-20251101", (5.00, 0.50, 6.25, 25.00)),
        ("claude-haiku-4-5", (1.00, 0.10, 1.25, 5.00)),
        # gateways
        ("openai/gpt-4.1", (2.00, 0.50, 2.00, 8.00)),
        ("anthropic/claude-sonnet-4.5", (3.00, 0.30, 3.75, 15.00)),
        ("anthropic.claude-opus-4-1-20250805-v1:0", (15.00, 1.50, 18.75, 75.00)),
        ("GPT-4.1", (2.00, 0.50, 2.00, 8.00)),
    ],
)
def test_builtin_families(model: str, expected: tuple[float, ...]) -> None:
    price = PriceTable().price(model)
    assert rates(price) == pytest.approx(expected)
    assert price.source == "builtin" and price.priced and price.as_of == READ_ON


def test_every_builtin_entry_is_sane_and_reachable() -> None:
    table = PriceTable()
    for entry in BUILTIN_PRICES:
        assert 0 < entry.cached_input <= entry.input <= entry.cache_write, entry.glob
        assert entry.output >= entry.input, entry.glob
        # A name of the entry's own family finds it: no earlier glob shadows it.
        sample = entry.glob.lstrip("*").replace("*", "-x")
        assert table.price(sample).glob == entry.glob, sample


def test_specific_entries_come_before_their_family() -> None:
    table = PriceTable()
    assert table.price("gpt-4.1-nano").glob == "gpt-4.1-nano*"
    assert table.price("gpt-4o-mini").glob == "gpt-4o-mini*"
    assert table.price("o4-mini").glob == "o4-mini*"
    assert table.price("gpt-5.4-nano").glob == "gpt-5.4-nano*"


def test_config_entries_override_the_builtin_table_in_order() -> None:
    settings = PricingSettings(
        models={
            "gpt-4.1-mini*": ModelPrice(input=9.0, output=9.0),
            "gpt-4.1*": ModelPrice(input=1.0, cached_input=0.1, cache_write=1.5, output=4.0),
        }
    )
    table = PriceTable(settings)
    own = table.price("gpt-4.1-2025-04-14")
    assert rates(own) == (1.0, 0.1, 1.5, 4.0)
    assert (own.source, own.glob, own.as_of) == ("config", "gpt-4.1*", None)
    # null cached_input / cache_write: the input price
    assert rates(table.price("gpt-4.1-mini")) == (9.0, 9.0, 9.0, 9.0)
    assert table.price("gpt-4o").source == "builtin"


def test_unknown_model_is_unpriced_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable()
    with caplog.at_level(logging.WARNING, logger="proxy.pricing"):
        first = table.price("llama-3.1-8b-instruct")
        again = table.price("llama-3.1-8b-instruct")
        table.price("qwen2.5-coder")
    assert first is again
    assert first == UNPRICED and not first.priced
    assert first.cost(BilledUsage(1_000, 1_000, 1_000, 1_000)) == 0.0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "'llama-3.1-8b-instruct'" in warnings[0] and "unpriced" in warnings[0]


def test_unknown_model_takes_the_configured_default(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable(
        PricingSettings(default=ModelPrice(input=1.0, cached_input=0.25, output=4.0))
    )
    with caplog.at_level(logging.WARNING, logger="proxy.pricing"):
        price = table.price("my-finetune")
    assert rates(price) == (1.0, 0.25, 1.0, 4.0)
    assert price.source == "default" and price.priced
    assert "pricing.default" in caplog.records[0].getMessage()


def test_the_table_remembers_a_bounded_number_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.economics.prices.MAX_REMEMBERED", 3)
    table = PriceTable()
    for i in range(10):
        table.price(f"unknown-{i}")
    assert len(table._known) == 3


def test_cost_is_dollars_per_million() -> None:
    sonnet = PriceTable().price("claude-sonnet-4-5")
    usage = BilledUsage(input_uncached=1_000, cached_read=100_000, cache_write=10_000, output=2_000)
    # 1000*3 + 100000*0.3 + 10000*3.75 + 2000*15 = 3000 + 30000 + 37500 + 30000 = 100500
    assert sonnet.cost(usage) == pytest.approx(0.1005)
