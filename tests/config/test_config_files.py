"""Every YAML file under config/ loads, and config/proxy.yaml is exactly the defaults."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from proxy.config.settings import Settings, parse_settings
from proxy.core.policy import PolicySettings
from proxy.state.sealing import parse_key
from tests.support.paths import REPO_ROOT

CONFIG_DIR = REPO_ROOT / "config"
FILES = sorted(CONFIG_DIR.rglob("*.yaml")) + sorted(CONFIG_DIR.rglob("*.yml"))
# ${NAME} without a default must come from the environment: give each one a value that is valid
# wherever a secret goes (a URL is checked by name below), including an AES key.
_REQUIRED_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FAKE_KEY = base64.b64encode(bytes(range(32))).decode()


def fake_environ(text: str) -> dict[str, str]:
    environ = {}
    for i, name in enumerate(_REQUIRED_ENV.findall(text)):
        environ[name] = "redis://127.0.0.1:6379/0" if name.endswith("URL") else f"k{i}:{_FAKE_KEY}"
    return environ


def test_there_are_example_files() -> None:
    names = {p.name for p in FILES}
    assert "proxy.yaml" in names
    examples = {p.name for p in (CONFIG_DIR / "examples").glob("*.yaml")}
    assert {"coding-agent.yaml", "long-chat.yaml", "cheap-fast.yaml", "air-gapped.yaml"} <= examples


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_config_file_loads(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    settings = parse_settings(text, source=str(path), environ=fake_environ(text))
    # check-config does not open the store; the keys' format is checked here instead.
    for i, key in enumerate(settings.store.encryption_keys):
        parse_key(key.get_secret_value(), index=i)
    # A commented file: every example explains itself.
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 5


def test_proxy_yaml_is_exactly_the_defaults() -> None:
    path = CONFIG_DIR / "proxy.yaml"
    assert parse_settings(path.read_text(encoding="utf-8"), source=str(path), environ={}) == (
        Settings()
    )


def _leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths |= _leaf_paths(annotation, f"{prefix}{name}.")
        elif annotation == dict[str, PolicySettings]:
            paths |= _leaf_paths(PolicySettings, f"{prefix}{name}.default.")
        else:
            paths.add(prefix + name)
    return paths


def _yaml_paths(data: Any, prefix: str = "") -> set[str]:
    if not isinstance(data, dict) or not data:
        return {prefix.rstrip(".")}
    paths = set()
    for key, value in data.items():
        paths |= _yaml_paths(value, f"{prefix}{key}.")
    return paths


def test_proxy_yaml_shows_every_knob() -> None:
    data = yaml.safe_load((CONFIG_DIR / "proxy.yaml").read_text(encoding="utf-8"))
    shown = _yaml_paths(data)
    # A knob whose value is a mapping (pricing.reference) is shown by its own keys.
    missing = {
        path
        for path in _leaf_paths(Settings) - shown
        if not any(key.startswith(path + ".") for key in shown)
    }
    assert not missing, f"config/proxy.yaml does not show: {sorted(missing)}"


def test_a_bare_off_strategy_is_off() -> None:
    # YAML 1.1 reads `off` as false; the documented `strategy: off` must still mean "off".
    settings = parse_settings("policies:\n  raw:\n    strategy: off\n", environ={})
    assert settings.policies["raw"].strategy == "off"
