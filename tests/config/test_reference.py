"""docs/configuration.md is generated from the settings models and must not go stale."""

from __future__ import annotations

from proxy.config.reference import REGENERATE, render
from tests.support.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "configuration.md"


def test_configuration_reference_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is stale: regenerate it with `{REGENERATE}`"
    )


def test_every_key_has_a_type_a_default_and_a_description() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    keys = [row for row in rows if "." in row.split("`")[1]]
    assert len(keys) > 60
    for row in keys:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert all(cells), f"empty cell in {row}"


def test_reference_names_bounds_and_choices() -> None:
    text = render()
    assert "| `server.port` | integer, >= 0, <= 65535 | `8080` |" in text
    assert "`summarize` \\| `neuralyze` \\| `trim` \\| `off`" in text
    assert "| `policies.<name>.keep.interactions` | integer or null, >= 0 | `2` |" in text
    assert "| `routes[].policy` | string | required |" in text
