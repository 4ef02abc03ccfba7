"""proxy.economics imports only itself, config, core, errors and types: anything may use it."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import proxy.economics

ALLOWED = ("proxy.economics", "proxy.config", "proxy.core", "proxy.errors", "proxy.types")
FORBIDDEN = (
    "proxy.app",
    "proxy.compaction",
    "proxy.dialects",
    "proxy.ops",
    "proxy.proxying",
    "proxy.server",
    "proxy.state",
    "proxy.tools",
    "proxy.upstream",
)
MODULES = [f"proxy.economics.{m.name}" for m in pkgutil.iter_modules(proxy.economics.__path__)]


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_economics_imports_only_what_it_may() -> None:
    assert {"proxy.economics.prices", "proxy.economics.ledger"} <= set(MODULES)
    for path in Path(proxy.economics.__path__[0]).glob("*.py"):
        ours = {n for n in imported(path) if n == "proxy" or n.startswith("proxy.")}
        wrong = {n for n in ours if not any(n == a or n.startswith(a + ".") for a in ALLOWED)}
        assert wrong == set(), path.name


def test_economics_loads_nothing_of_the_request_path() -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {MODULES!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", script], check=True, capture_output=True, text=True
        ).stdout
    )
    assert [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)] == []
