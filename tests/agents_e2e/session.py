"""What the live run and the replay share: the proxy's configuration (the coding-agent recipe at
a low token trigger), the servers (the strict provider, the proxy behind a recorder), and the
scratch project the agents work in.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from proxy.app import create_app
from proxy.config.settings import Settings
from proxy.server.run import uvicorn_options
from tests.agents_e2e.provider import SUMMARIZER_MODEL, StrictProvider
from tests.agents_e2e.recording import Recording
from tests.agents_e2e.script import commands
from tests.support.config import TENANT_SECRET, config
from tests.support.proxies import running_mock
from tests.support.servers import ThreadedUvicorn

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "config" / "examples" / "coding-agent.yaml"
# The project's package: real modules of this repository, a few kilobytes each, so that reading
# them fills the context the way reading a real code base does.
SOURCES = sorted((REPO / "proxy" / "dialects").glob("*.py"))[:14]
FILES = [path.name for path in SOURCES]


def policy(trigger_tokens: int, keep_tokens: int) -> dict[str, Any]:
    """The coding-agent recipe's policy with one token trigger and a token keep."""
    recipe = yaml.safe_load(RECIPE.read_text())["policies"]["default"]
    recipe["trigger"] = {
        **recipe["trigger"],
        "input_tokens": trigger_tokens,
        "context_fraction": 0,
        "interaction_tokens": 0,
    }
    recipe["keep"] = {"tokens": keep_tokens}
    return recipe


def settings(provider: str, recipe: dict[str, Any], *, missing: str = "auto") -> Settings:
    return config(
        {
            "conversation": {"missing": missing},
            "store": {"url": "memory://", "tenant_secret": TENANT_SECRET, "max_checkpoints": 32},
            "summarizer": {
                "model": SUMMARIZER_MODEL,
                "timeout_seconds": 30,
                "max_summary_tokens": 2048,
            },
            "upstream": {"anthropic_base_url": provider},
            "policies": {"default": recipe},
        },
        provider=provider,
    )


@dataclass
class Servers:
    provider: StrictProvider
    provider_url: str


@contextlib.contextmanager
def strict_provider() -> Iterator[Servers]:
    with running_mock() as mock:
        yield Servers(StrictProvider(mock, commands(FILES)), mock.url)


@contextlib.contextmanager
def recorded_proxy(
    provider_url: str, recipe: dict[str, Any], *, missing: str = "auto"
) -> Iterator[tuple[str, Recording]]:
    """A proxy as ``serve`` runs it, behind a recorder; (its URL, the recording). ``missing``:
    ``conversation.missing`` (``passthrough`` records an agent the proxy refuses to compact)."""
    current = settings(provider_url, recipe, missing=missing)
    recording = Recording(create_app(current))
    with ThreadedUvicorn(recording, **uvicorn_options(current)) as server:
        yield server.url, recording


CALC = '''"""A tiny calculator."""


def add(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
TESTS = """import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)


if __name__ == "__main__":
    unittest.main()
"""


def scratch_project(folder: Path) -> Path:
    """A small project with a failing test, in ``folder`` (created anew)."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "pkg").mkdir(parents=True)
    for source in SOURCES:
        shutil.copy(source, folder / "pkg" / source.name)
    (folder / "calc.py").write_text(CALC)
    (folder / "test_calc.py").write_text(TESTS)
    readme = "# calc\n\nA calculator and a package of wire-format adapters.\n\n"
    (folder / "README.md").write_text(readme + "Run the tests: `python3 -m unittest -v`.\n")
    return folder
