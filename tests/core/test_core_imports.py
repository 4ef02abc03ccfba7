"""proxy.core stays pure (docs/architecture.md): importing every module of it,
in a fresh interpreter, loads no module of the proxy but the core and the shared leaves it may
use, and none of the libraries of the edge (web, HTTP, store, config file).

An allow-list for the proxy's own modules: whatever else the core came to load (proxy.state,
proxy.config, a dialect) fails here, named. tests/test_architecture.py checks the same rule on
the source's import statements; this test checks what actually ends up loaded.
"""

import json
import pkgutil
import subprocess
import sys

import pytest

import proxy.core

# The proxy's modules the core may load: itself, the root package and the shared leaves.
ALLOWED = ("proxy.core", "proxy.errors", "proxy.wirejson", "proxy.types")
# Libraries of the edge, never the core's. (proxy.types' ASGI aliases come from starlette.types,
# which imports nothing of starlette's web machinery: that module alone is allowed.)
EDGE_LIBRARIES = ("starlette", "uvicorn", "httpx", "aiohttp", "redis", "yaml")
HARMLESS = ("starlette", "starlette.types")


@pytest.fixture(scope="module")
def loaded() -> list[str]:
    """Every module loaded once the core's modules are imported, in a fresh interpreter."""
    modules = [f"proxy.core.{m.name}" for m in pkgutil.iter_modules(proxy.core.__path__)]
    assert "proxy.core.planner" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    )
    return json.loads(result.stdout)


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_core_loads_only_the_core_and_the_shared_leaves(loaded: list[str]) -> None:
    ours = [m for m in loaded if within(m, ("proxy",)) and m != "proxy"]
    assert "proxy.core.planner" in ours
    assert [m for m in ours if not within(m, ALLOWED)] == []


def test_core_imports_nothing_of_the_edge(loaded: list[str]) -> None:
    edge = [m for m in loaded if within(m, EDGE_LIBRARIES) and m not in HARMLESS]
    assert edge == []
