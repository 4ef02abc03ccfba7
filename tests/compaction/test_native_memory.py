"""How long a provider's refusal of its own context management is remembered (``strategy:
native``): a model refused falls back until the memory expires, then native is tried again."""

from __future__ import annotations

from proxy.compaction.dialect.native import REMEMBERED_SECONDS, Unsupported


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_refusal_is_forgotten_after_its_time() -> None:
    clock = Clock()
    unsupported = Unsupported(clock=clock)
    unsupported.add("messages", "claude-x", "tenant-a")
    assert ("messages", "claude-x", "tenant-a") in unsupported
    assert ("responses", "claude-x", "tenant-a") not in unsupported
    assert ("messages", "claude-x", "tenant-b") not in unsupported
    clock.now += REMEMBERED_SECONDS - 1
    assert ("messages", "claude-x", "tenant-a") in unsupported
    clock.now += 2
    assert ("messages", "claude-x", "tenant-a") not in unsupported  # the provider gets asked again
    unsupported.add("messages", "claude-x", "tenant-a")
    assert ("messages", "claude-x", "tenant-a") in unsupported
