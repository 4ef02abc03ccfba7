"""The shape of proxy/ (docs/architecture.md): imports run one way with no cycle, between modules
or between layers; every layer (each folder under proxy/ and each module at its top) imports only
what its allow-list names, and the allow-lists themselves run one way; nothing but the
composition root imports ops; the names of the proxy's headers are spelled in one module each;
no module grows past 400 lines.

The import graph is read from the source with ``ast``: every ``import`` and ``from ... import``,
inside functions and ``if TYPE_CHECKING:`` blocks too (a type-only import is still a dependency,
and still a cycle). An edge goes to the most precise module named: ``from proxy.core import
facts`` and ``from proxy.core.facts import FactCache`` are both edges to proxy.core.facts. Each
failure lists every violation with the importing file and line.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

# A module's layer: its folder under proxy/ (core, state, ...) or, at the top, its own name
# (errors, types, app, ...). What each layer may import besides itself and the root package.
# Every layer has a row (tested), and the rows run one way (tested): a layer may import only
# layers below it, so the allow-lists cannot admit a cycle between layers.
CONTRACT = {"errors", "types", "wirejson"}  # the shared leaves: errors below the other two
# The spans of the request path (over opentelemetry-api; imports nothing of ours): every layer
# that does I/O may open one; core stays pure.
TRACING = "tracing"
# What the request path is built from: the layers proxying, the route, may use.
REQUEST_PATH = {
    "compaction",
    "config",
    "core",
    "dialects",
    "economics",
    "events",
    "server",
    "state",
    "upstream",
    TRACING,
    *CONTRACT,
}
ALLOWED: dict[str, set[str]] = {
    # The leaves: nothing of ours, or only the error types.
    "errors": set(),
    "types": {"errors"},
    "wirejson": {"errors"},
    TRACING: set(),
    "events": set(),  # the listeners' registry: it knows no listener
    # The pure core: rules over neutral messages, no I/O.
    "core": CONTRACT,
    # The YAML contract: the sections of every part, over the core's policy settings.
    "config": {"core", *CONTRACT},
    "economics": {"config", "core", *CONTRACT},
    "state": {"core", "config", "events", TRACING, *CONTRACT},
    "upstream": {"config", *CONTRACT},
    "server": {"config", *CONTRACT},  # the HTTP server's own parts, which know no route
    "compaction": {
        "state",
        "core",
        "config",
        "upstream",
        "events",
        "economics",
        TRACING,
        *CONTRACT,
    },
    "dialects": {"compaction", "core", *CONTRACT},
    "proxying": REQUEST_PATH,
    # Operator features, which hear events; the composition root wires them in.
    "ops": {"proxying", *REQUEST_PATH},
    "app": {"ops", "proxying", *REQUEST_PATH},  # the composition root
    "tools": {"app", "proxying", *REQUEST_PATH},  # offline commands over the real parts
    "cli": {"app", "tools", *REQUEST_PATH},
    "__main__": {"cli"},
}
# Who may import proxy.ops: the composition root and ops itself (everyone else hears events).
OPS_IMPORTERS = {"ops", "app", "cli", "__main__"}
# Where the names of the proxy's headers are spelled: its own X-Compaction* headers in the
# protocol module; the headers that name a conversation (X-Conversation-Id, the agents' session
# headers) in the default of the setting that lists them, in config, which sits below compaction
# and so cannot import the protocol module.
HEADER_HOMES = {
    "proxy/compaction/protocol.py": re.compile(r"x-compaction(-[a-z]+)*"),
    "proxy/config/store.py": re.compile(
        r"x-conversation-id|x-claude-code-session-id|thread-id|session-id|x-session-id"
    ),
}
# A literal that is a header's name: the name alone, or with the punctuation of a header line or
# an SSE comment (": name", "name: %s"); a sentence that mentions a header is prose, not a name.
_PLACEHOLDER = re.compile(r"%[a-z]|\{[^}]*\}")
MAX_LINES = 400
# Modules allowed past MAX_LINES, each with its reason (none today: keep it so).
LONG_MODULES: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    file: str  # the importing file, from the repository's root
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.file}:{self.line})"


class ImportGraph:
    """The modules of the package at ``root`` and the imports between them."""

    def __init__(self, root: Path) -> None:
        self.base = root.parent
        self.files: dict[str, Path] = {}
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(self.base).with_suffix("").parts
            self.files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        found: dict[tuple[str, str], Import] = {}
        for module in self.files:
            for edge in self._imports_of(module):
                found.setdefault((edge.source, edge.target), edge)
        self.edges = list(found.values())

    def known(self, name: str) -> str | None:
        """The longest prefix of ``name`` that is a module of the package (None: not ours)."""
        parts = name.split(".")
        while parts and ".".join(parts) not in self.files:
            parts.pop()
        return ".".join(parts) or None

    def file_of(self, module: str) -> str:
        return self.files[module].relative_to(self.base).as_posix()

    def lines_of(self, module: str) -> int:
        return len(self.files[module].read_text(encoding="utf-8").splitlines())

    def _imports_of(self, module: str) -> list[Import]:
        path = self.files[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up level - 1 packages from this one
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from a import b`` imports the module a.b when there is one, else a.
                names = [self._submodule(base, alias.name) for alias in node.names]
            else:
                continue
            for name in names:
                target = self.known(name)
                if target is not None and target != module:
                    found.append(Import(module, target, self.file_of(module), node.lineno))
        return found

    def _submodule(self, base: str, name: str) -> str:
        candidate = f"{base}.{name}"
        return candidate if candidate in self.files else base

    def edge(self, source: str, target: str) -> Import | None:
        return next((e for e in self.edges if (e.source, e.target) == (source, target)), None)

    def cycles(self) -> list[list[str]]:
        """One cycle (a path a -> ... -> a) for each strongly connected group of modules."""
        following: dict[str, list[str]] = {m: [] for m in self.files}
        for edge in self.edges:
            following[edge.source].append(edge.target)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        groups: list[list[str]] = []

        def visit(module: str) -> None:  # Tarjan's strongly connected components
            index[module] = low[module] = len(index)
            stack.append(module)
            for target in following[module]:
                if target not in index:
                    visit(target)
                    low[module] = min(low[module], low[target])
                elif target in stack:
                    low[module] = min(low[module], index[target])
            if low[module] == index[module]:
                group = stack[stack.index(module) :]
                del stack[stack.index(module) :]
                if len(group) > 1:
                    groups.append(sorted(group))

        for module in self.files:
            if module not in index:
                visit(module)
        return [shortest_cycle(group, following) for group in groups]


def shortest_cycle(group: list[str], following: dict[str, list[str]]) -> list[str]:
    """The shortest cycle through the group's first module (breadth first, inside the group)."""
    start, members = group[0], set(group)
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        reached = []
        for module in frontier:
            for target in following[module]:
                if target == start:
                    path = [module]
                    while (before := came_from[path[-1]]) is not None:
                        path.append(before)
                    return [*reversed(path), start]
                if target in members and target not in came_from:
                    came_from[target] = module
                    reached.append(target)
        frontier = reached
    return [*group, start]  # not reached: a strongly connected group always has a cycle


GRAPH = ImportGraph(REPO_ROOT / "proxy")


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "": the root package, open to every layer


def allowed(source_layer: str) -> set[str] | None:
    """The layers ``source_layer`` may import (itself included); None: no allow-list holds it."""
    if source_layer not in ALLOWED:
        return None
    return {source_layer, "", *ALLOWED[source_layer]}


def layer_edges(graph: ImportGraph) -> dict[tuple[str, str], Import]:
    """One import for each pair of layers (importing, imported) that are not the same."""
    found: dict[tuple[str, str], Import] = {}
    for edge in graph.edges:
        pair = (layer(edge.source), layer(edge.target))
        if pair[0] != pair[1] and "" not in pair:
            found.setdefault(pair, edge)
    return found


def layer_cycles(following: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per group of layers that reach one another (each group once)."""
    found: list[list[str]] = []
    covered: set[str] = set()
    for start in sorted(following):
        if start in covered:
            continue
        came_from: dict[str, str] = {}
        frontier, path = [start], None
        while frontier and path is None:  # breadth first: the first return to start is shortest
            reached = []
            for name in frontier:
                for target in sorted(following.get(name, ())):
                    if target == start:
                        path = [name]
                        while path[-1] != start:
                            path.append(came_from[path[-1]])
                        break
                    if target not in came_from:
                        came_from[target] = name
                        reached.append(target)
                if path is not None:
                    break
            frontier = reached
        if path is not None:
            cycle = [*reversed(path), start]
            covered.update(cycle)
            found.append(cycle)
    return found


def report(title: str, lines: list[str]) -> str:
    return f"{title} ({len(lines)}):\n  " + "\n  ".join(lines)


def test_the_walker_finds_every_kind_of_import(tmp_path: Path) -> None:
    """On a package made for it: plain, from, relative, function-level and type-only imports,
    and a cycle through a TYPE_CHECKING block."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "",
        "a.py": "import pkg.b\nfrom pkg.sub import c\n",
        "b.py": "def f():\n    from .sub.c import thing\n",
        "sub/__init__.py": "from . import c\n",
        "sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
    }
    for name, text in sources.items():
        (root / name).write_text(text)
    graph = ImportGraph(root)
    edges = {(e.source, e.target) for e in graph.edges}
    assert edges == {
        ("pkg.a", "pkg.b"),
        ("pkg.a", "pkg.sub.c"),
        ("pkg.b", "pkg.sub.c"),
        ("pkg.sub", "pkg.sub.c"),
        ("pkg.sub.c", "pkg.a"),
    }
    assert graph.cycles() == [["pkg.a", "pkg.sub.c", "pkg.a"]]
    assert GRAPH.edge("proxy.core.planner", "proxy.core.interactions") is not None


def test_no_import_cycles() -> None:
    found = GRAPH.cycles()
    lines = []
    for path in found:
        steps = [GRAPH.edge(a, b) for a, b in itertools.pairwise(path)]
        lines.append(
            " -> ".join(path) + "  [" + ", ".join(f"{s.file}:{s.line}" for s in steps if s) + "]"
        )
    assert not found, report("import cycles", lines)


def test_every_layer_has_an_allow_list() -> None:
    layers = {layer(m) for m in GRAPH.files} - {""}
    assert layers - set(ALLOWED) == set(), "layers without a row in ALLOWED"
    assert set(ALLOWED) - layers == set(), "rows in ALLOWED for layers that are gone"


def test_no_cycles_between_layers() -> None:
    """Modules without a cycle can still tie layers together (config.settings -> state.settings
    -> config.sections was one): each layer's imports, taken together, run one way."""
    edges = layer_edges(GRAPH)
    following: dict[str, set[str]] = {}
    for source, target in edges:
        following.setdefault(source, set()).add(target)
    lines = [
        " -> ".join(cycle)
        + "  ["
        + ", ".join(str(edges[s]) for s in itertools.pairwise(cycle))
        + "]"
        for cycle in layer_cycles(following)
    ]
    assert not lines, report("cycles between layers", lines)


def test_the_allow_lists_run_one_way() -> None:
    rows = {name: set(listed) - {name} for name, listed in ALLOWED.items()}
    cycles = [" -> ".join(cycle) for cycle in layer_cycles(rows)]
    assert not cycles, report("allow-lists that admit a cycle between layers", cycles)


def test_the_layer_cycle_finder_finds_one(tmp_path: Path) -> None:
    """On a package made for it: modules without a cycle whose layers import each other."""
    root = tmp_path / "pkg"
    for folder in ("config", "state"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "config" / "settings.py").write_text("from pkg.state import settings\n")
    (root / "state" / "settings.py").write_text("from pkg.config import sections\n")
    (root / "config" / "sections.py").write_text("")
    graph = ImportGraph(root)
    assert graph.cycles() == []
    following: dict[str, set[str]] = {}
    for source, target in layer_edges(graph):
        following.setdefault(source, set()).add(target)
    assert layer_cycles(following) == [["config", "state", "config"]]
    assert layer_cycles({"a": {"b"}, "b": {"c"}}) == []


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_each_layer_imports_only_its_allow_list(source: str) -> None:
    may = allowed(source)
    assert may is not None
    wrong = [
        f"{edge}: {source} may not import {layer(edge.target)}"
        for edge in GRAPH.edges
        if layer(edge.source) == source and layer(edge.target) not in may
    ]
    assert not wrong, report(f"imports of {source} outside its allow-list", sorted(wrong))


def test_only_the_composition_root_imports_ops() -> None:
    wrong = [
        str(edge)
        for edge in GRAPH.edges
        if layer(edge.target) == "ops" and layer(edge.source) not in OPS_IMPORTERS
    ]
    assert not wrong, report("imports of proxy.ops outside app, cli and ops", sorted(wrong))


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and of its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def spelled_names(source: str) -> list[tuple[int, str]]:
    """The string and bytes literals of ``source`` that are a header's name (line, literal)."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            continue
        bare = _PLACEHOLDER.sub("", value).strip(" :\n\t").lower()
        if any(pattern.fullmatch(bare) for pattern in HEADER_HOMES.values()):
            found.append((node.lineno, value))
    return found


def test_header_names_are_spelled_in_one_module_each() -> None:
    wrong = []
    for module in GRAPH.files:
        name = GRAPH.file_of(module)
        for line, literal in spelled_names(GRAPH.files[module].read_text(encoding="utf-8")):
            bare = _PLACEHOLDER.sub("", literal).strip(" :\n\t").lower()
            home = next(h for h, pattern in HEADER_HOMES.items() if pattern.fullmatch(bare))
            if name != home:
                wrong.append(f"{name}:{line}: {literal!r} (its home: {home})")
    assert not wrong, report("header names spelled outside their home", sorted(wrong))


def test_the_header_name_finder_tells_names_from_prose() -> None:
    source = (
        '"""X-Compaction-Recalls: a docstring may name it."""\n'
        'A = b"x-compaction-recalls"\n'
        'B = b": x-compaction-recalls %d\\n\\n"\n'
        'C = "X-Conversation-Id"\n'
        'D = "Answers carry X-Compaction-Ledger: the dollars so far."\n'
        'E = f"{x}"\n'
    )
    assert [line for line, _ in spelled_names(source)] == [2, 3, 4]
    assert {h for h in HEADER_HOMES} <= set(GRAPH.file_of(m) for m in GRAPH.files)


def test_no_module_is_longer_than_400_lines() -> None:
    long = [
        f"{GRAPH.file_of(module)}: {GRAPH.lines_of(module)} lines"
        for module in GRAPH.files
        if GRAPH.lines_of(module) > MAX_LINES and GRAPH.file_of(module) not in LONG_MODULES
    ]
    assert not long, report(f"modules over {MAX_LINES} lines", sorted(long))


def test_every_long_module_exception_is_still_needed() -> None:
    """An exception for a module that shrank, moved or went away is stale: remove it."""
    sizes = {GRAPH.file_of(m): GRAPH.lines_of(m) for m in GRAPH.files}
    stale = [name for name in LONG_MODULES if sizes.get(name, 0) <= MAX_LINES]
    assert not stale, report("LONG_MODULES entries no longer needed", stale)


# "issue 19", "(issue #7)": a number a newcomer reading the code cannot follow.
_ISSUE_NUMBER = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def test_comments_say_why_not_which_issue() -> None:
    cited = [
        f"{GRAPH.file_of(module)}:{number}: {line.strip()}"
        for module in GRAPH.files
        for number, line in enumerate(
            GRAPH.files[module].read_text(encoding="utf-8").splitlines(), 1
        )
        if _ISSUE_NUMBER.search(line)
    ]
    assert not cited, report("issue numbers in the code (say why instead)", cited)
