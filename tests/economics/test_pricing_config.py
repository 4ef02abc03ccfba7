"""The `pricing:` section: overrides per model glob, validated with the key path and the line."""

from __future__ import annotations

import pytest

from proxy.config.settings import Settings, parse_settings
from proxy.economics.prices import PriceTable
from proxy.errors import ConfigError

YAML = """\
pricing:
  models:
    "gpt-4.1*": {input: 2.0, cached_input: 0.5, cache_write: 2.0, output: 8.0}
    "my-claude*": {input: 3, cached_input: 0.3, cache_write: 3.75, output: 15}
  default: {input: 1.0, output: 4.0}
"""


def test_defaults_price_with_the_builtin_table_only() -> None:
    pricing = Settings().pricing
    assert pricing.models == {} and pricing.default is None


def test_yaml_overrides_reach_the_price_table() -> None:
    pricing = parse_settings(YAML, environ={}).pricing
    assert list(pricing.models) == ["gpt-4.1*", "my-claude*"]
    table = PriceTable(pricing)
    claude = table.price("my-claude-v2")
    assert (claude.input, claude.cached_input, claude.cache_write, claude.output) == (
        3.0,
        0.3,
        3.75,
        15.0,
    )
    assert table.price("unknown").source == "default"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{input: -1, output: 8}", "greater than or equal to 0"),
        ("{input: 2, output: .inf}", "finite number"),
        ("{input: 2, output: yes}", "not a boolean"),
        ("{input: two, output: 8}", "valid number"),
        ("{output: 8}", "Field required"),
        ("{input: 2, output: 8, cached: 0.5}", "unknown key"),
    ],
)
def test_invalid_prices_name_the_key_and_line(entry: str, message: str) -> None:
    text = f'server: {{port: 8080}}\npricing:\n  models:\n    "gpt-4.1*": {entry}\n'
    with pytest.raises(ConfigError) as raised:
        parse_settings(text, source="proxy.yaml", environ={})
    error = str(raised.value)
    assert "pricing.models.gpt-4.1*" in error
    assert "(proxy.yaml, line 4)" in error
    assert message in error
