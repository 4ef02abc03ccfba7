"""The tokens of the texts recall's notes change, remembered."""

from __future__ import annotations

import threading

from proxy.core.tokens import TokenCounter


class TextCounts:
    """The tokens of the texts recall's notes change (a summary message with its index, the
    stubs), remembered: every turn until the next summary counts the same texts again. Bounded
    by the characters held (dropped all at once past them); safe to share with worker threads."""

    def __init__(self, counter: TokenCounter, *, max_chars: int = 4 << 20) -> None:
        self._counter = counter
        self._max_chars = max_chars
        self._known: dict[tuple[str, str], int] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def count(self, text: str, *, encoding: str) -> int:
        key = (encoding, text)
        tokens = self._known.get(key)
        if tokens is None:
            tokens = self._counter.count_encoded(text, encoding)
            with self._lock:
                if self._chars + len(text) > self._max_chars:
                    self._known.clear()
                    self._chars = 0
                self._known[key] = tokens
                self._chars += len(text)
        return tokens
