"""The originals a compacted request refers to are written once per process (``Recall._keep``):
the same pieces again are not written again, unless a write failed or the process forgot
them meanwhile (then they are written again)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.compaction.recall import tool
from proxy.compaction.recall.covered import Piece
from proxy.compaction.recall.tool import Recall
from proxy.config.recall import RecallSettings
from proxy.core.tokens import TokenCounter
from proxy.events import Listeners


class FakeOriginals:
    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.failing = False

    async def keep(
        self, tenant: str, conversation_id: str, pieces: Sequence[tuple[str, str]], **_: Any
    ) -> SimpleNamespace | None:
        self.writes.append([handle for handle, _ in pieces])
        return None if self.failing else SimpleNamespace(added=len(pieces), evicted=0)


def conv(name: str) -> Any:
    return SimpleNamespace(key=name, tenant="t", conversation_id=name)


def pieces(*handles: str) -> dict[str, Piece]:
    return {h: Piece(h, "label", f"text of {h}") for h in handles}


def recall(originals: FakeOriginals) -> Recall:
    return Recall(
        RecallSettings(),
        originals=originals,  # type: ignore[arg-type]
        tenancy=None,  # type: ignore[arg-type]
        listeners=Listeners(),
        counter=TokenCounter(),
    )


def test_the_same_pieces_are_written_once_and_again_after_a_failed_write() -> None:
    async def run() -> list[list[str]]:
        originals = FakeOriginals()
        r = recall(originals)
        summary = pieces("ra", "rb")
        for _ in range(3):  # the summary's pieces, each turn until the next summary
            r._keep(conv("c"), summary)
            await r.join()
        grown = {**summary, **pieces("rc")}
        originals.failing = True
        r._keep(conv("c"), grown)
        await r.join()
        originals.failing = False
        r._keep(conv("c"), grown)  # the very same pieces: written again, the write failed
        await r.join()
        r._keep(conv("c"), grown)
        await r.join()
        return originals.writes

    assert asyncio.run(run()) == [["ra", "rb"], ["rc"], ["rc"]]


def test_pieces_the_process_forgot_are_written_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool, "_KNOWN_KEPT", 3)

    async def run() -> list[list[str]]:
        originals = FakeOriginals()
        r = recall(originals)
        first, other = pieces("ra", "rb"), pieces("rx", "ry")
        r._keep(conv("a"), first)
        r._keep(conv("b"), other)  # past the bound: "ra" is forgotten
        r._keep(conv("a"), first)  # "ra" again, "rb" forgotten as it is kept
        r._keep(conv("b"), other)
        r._keep(conv("a"), first)
        await r.join()
        return originals.writes

    assert asyncio.run(run()) == [["ra", "rb"], ["rx", "ry"], ["ra"], ["rb"]]
