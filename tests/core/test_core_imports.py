"""proxy.core stays pure: importing every module of it loads no web, HTTP, store or config
loader (issue 11, docs/architecture.md)."""

import json
import pkgutil
import subprocess
import sys

import proxy.core

FORBIDDEN = (
    "starlette",
    "uvicorn",
    "httpx",
    "aiohttp",
    "redis",
    "yaml",
    "proxy.config.settings",
    "proxy.state.opening",
    "proxy.upstream",
    "proxy.app",
    "proxy.proxying.routes",
    "proxy.compaction.compactor",
    "proxy.dialects",
)


def test_core_imports_nothing_of_the_edge():
    modules = [f"proxy.core.{m.name}" for m in pkgutil.iter_modules(proxy.core.__path__)]
    assert "proxy.core.planner" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", script], check=True, capture_output=True, text=True
        ).stdout
    )
    leaked = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert leaked == []
