"""Values carried per history, each holding its messages (``proxy.core.carried``): bounded by
histories and by the messages they hold."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sized
from typing import Generic, Protocol, TypeVar


class _Holding(Protocol):
    @property
    def messages(self) -> Sized: ...


H = TypeVar("H", bound=_Holding)


class Held(Generic[H]):
    """One value per key (a history: its first message's id, and a tag), the least recently
    stored dropped first. Shared with worker threads: a lookup takes a reference, a change is
    made under a lock."""

    def __init__(self, max_histories: int, max_messages: int) -> None:
        self.max_histories = max_histories
        self.max_messages = max_messages
        self._values: OrderedDict[Hashable, H] = OrderedDict()
        self._messages = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> H | None:
        return self._values.get(key)

    def put(self, key: Hashable, value: H) -> None:
        if len(value.messages) > self.max_messages:
            return
        with self._lock:
            old = self._values.pop(key, None)
            self._messages += len(value.messages) - (0 if old is None else len(old.messages))
            self._values[key] = value
            while len(self._values) > self.max_histories or self._messages > self.max_messages:
                self._messages -= len(self._values.popitem(last=False)[1].messages)

    def drop(self, which: Callable[[H], bool]) -> None:
        """Drop the values ``which`` says to."""
        with self._lock:
            for key in [k for k, value in self._values.items() if which(value)]:
                self._messages -= len(self._values.pop(key).messages)
