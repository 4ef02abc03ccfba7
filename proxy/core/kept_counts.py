"""Token counts of texts counted again and again, kept by their exact text: a conversation's
stored summary (weighed on each of its requests), an agent's tools (sent with every request, by
their JSON), the texts recall's notes change (a summary message with its index, the stubs,
the same until the next summary)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class KeptCounts:
    """Counts by key (an encoding and a text), bounded by keys and by the characters their
    texts hold, all dropped at once past either. One for a counter and all its request views;
    safe to share with worker threads (a change under a lock)."""

    def __init__(self, *, max_texts: int, max_chars: int) -> None:
        self.max_texts = max_texts
        self.max_chars = max_chars
        self._counts: dict[Hashable, int] = {}
        self.chars = 0  # what the kept texts hold
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, key: Hashable, size: int, count: Callable[[], int]) -> int:
        """The count kept under ``key`` (``size``: the characters its text holds), else
        ``count()``, kept when within the bound."""
        tokens = self._counts.get(key)
        if tokens is None:
            tokens = count()
            with self._lock:
                if len(self._counts) >= self.max_texts or self.chars + size > self.max_chars:
                    self._counts.clear()
                    self.chars = 0
                if size <= self.max_chars:
                    self._counts[key] = tokens
                    self.chars += size
        return tokens
