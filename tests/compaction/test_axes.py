"""The shape of proxy/compaction/ (docs/architecture.md, "Compaction by axis"): a root of shared
leaves and the request pipeline, and one sub-package per axis (dialect, models, money, summaries,
recall, agents, native). Every import between two parts of compaction goes down the floors below;
a new module is placed on a floor before it lands (tested), and the root stays small.

A part is a sub-package (all its modules together) or a module at compaction's root.
"""

from __future__ import annotations

import pytest

from tests.test_architecture import GRAPH, report

PACKAGE = "proxy.compaction"
# Lowest first. A part may import parts on floors below its own, never beside or above it.
FLOORS: list[set[str]] = [
    {"protocol", "events", "offload", "dialect"},  # what every part shares; a dialect's contract
    {"settings", "policies", "models"},  # the YAML, which policy applies, what a model is
    {"conversation"},  # who and what one request is about
    {"planning", "review", "render"},  # the core's plan, its one hook, the plan on the wire
    {"money"},  # spending, pace, the price trigger
    {"summaries"},  # made, stored, pinned, ahead of time
    {"recall", "rescue"},  # what a summary removed, fetched back; an overflow's rescue
    {"decision"},  # what the route gets: the request to send and who hears the answer
    # an agent's own compaction; the answer heard; one request read and planned
    {"agents", "follow_up", "reading"},
    {"native"},  # the provider's own compaction, beside the proxy's
    {"rewriter"},  # decide -> plan -> render for one request
    {"compactor"},  # the parts wired together: what the route holds
]
ROOT_LIMIT = 15


def part(module: str) -> str | None:
    """The part of compaction a module belongs to; None: outside compaction, or its package."""
    if not module.startswith(PACKAGE + "."):
        return None
    return module[len(PACKAGE) + 1 :].split(".")[0]


FLOOR_OF = {name: level for level, names in enumerate(FLOORS) for name in names}


def test_every_part_of_compaction_has_a_floor() -> None:
    parts = {p for m in GRAPH.files if (p := part(m)) is not None}
    assert parts - FLOOR_OF.keys() == set(), "place each new part of compaction on a floor"
    assert FLOOR_OF.keys() - parts == set(), "a floor names a part that is gone"


def test_imports_inside_compaction_go_down_the_floors() -> None:
    upward = [
        f"{part(e.source)} (floor {FLOOR_OF[p]}) -> {part(e.target)} (floor {FLOOR_OF[q]}): {e}"
        for e in GRAPH.edges
        if (p := part(e.source)) is not None
        and (q := part(e.target)) is not None
        and p != q
        and FLOOR_OF[q] >= FLOOR_OF[p]
    ]
    assert not upward, report("imports beside or up the floors of compaction", sorted(upward))


def test_the_root_of_compaction_stays_small() -> None:
    root = [
        m
        for m in GRAPH.files
        if part(m) is not None and m.count(".") == 2 and GRAPH.files[m].name != "__init__.py"
    ]
    assert len(root) <= ROOT_LIMIT, report("modules at compaction's root", sorted(root))


@pytest.mark.parametrize("axis", ["dialect", "models", "money", "summaries", "recall", "agents"])
def test_each_axis_is_a_package(axis: str) -> None:
    assert f"{PACKAGE}.{axis}" in GRAPH.files
    assert any(m.startswith(f"{PACKAGE}.{axis}.") for m in GRAPH.files)
