"""proxy.economics imports only itself, config, core, errors and types, so anything may use it:
checked on the source, TYPE_CHECKING imports included, directly and through what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy

ROOT = Path(proxy.__file__).resolve().parent.parent
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


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(module: str) -> set[str]:
    """The proxy modules ``module`` imports (a ``from a import b`` names ``a`` and, when it is
    a module, ``a.b``), and the packages that hold it, which Python runs first."""
    path = source(module)
    if path is None:
        return set()
    found = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if within(m, ("proxy",)) and source(m) is not None}


def economics_modules() -> list[str]:
    folder = ROOT / "proxy" / "economics"
    return sorted(f"proxy.economics.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__")


def test_economics_imports_only_what_it_may() -> None:
    modules = economics_modules()
    assert {"proxy.economics.prices", "proxy.economics.ledger"} <= set(modules)
    for module in [*modules, "proxy.economics"]:
        wrong = {m for m in imports_of(module) if m != "proxy" and not within(m, ALLOWED)}
        assert wrong == set(), module


def test_economics_reaches_nothing_of_the_request_path() -> None:
    seen: set[str] = set()
    todo = economics_modules()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imports_of(module) - seen)
    assert "proxy.config.pricing" in seen
    assert sorted(m for m in seen if within(m, FORBIDDEN)) == []
