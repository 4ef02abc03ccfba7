"""Per-message values of the last histories, carried to the next request that sends them again.

A conversation's next request sends its history again with a few messages appended, and the
messages taken from its last body are the very same Python objects (``proxy.core.resent``). A
value computed from a message alone (its tokens, its digest in the checkpoint chain) is then
what it was: ``Carried`` keeps the values of the last lists it was given, found by their first
message object, and a list whose first messages are *those objects* (identity, compared in C,
never equality: ``1 == True`` but they count and hash apart) gets their values back and
computes only the rest. Messages are never changed once parsed, and the list held keeps its
objects alive, so no other object can take one of their ids meanwhile. Only a request's
messages are carried (a parsed body is never changed): a caller's own list may change.

Bounded by lists and by the messages they hold. Shared with worker threads: a lookup takes a
reference, a store is made under a lock, and what is stored never changes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from operator import is_
from typing import Generic, TypeVar

V = TypeVar("V")
M = TypeVar("M")


class Carried(Generic[V]):
    """The values ``compute`` gives each message of a list, carried from the last list that
    began with the same message object (under the same ``tag``: an encoding, say)."""

    def __init__(self, max_lists: int = 64, max_messages: int = 1 << 17) -> None:
        self.max_lists = max_lists
        self.max_messages = max_messages
        self._lists: OrderedDict[tuple[int, Hashable], tuple[list[object], list[V]]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def values(
        self,
        messages: Sequence[M],
        compute: Callable[[Sequence[M]], list[V]],
        tag: Hashable = None,
    ) -> list[V]:
        """``compute(messages)``, computed only past what the last list held of them (a new
        list the caller may change)."""
        if not messages or self.max_lists <= 0:
            return compute(messages)
        key = (id(messages[0]), tag)
        last = self._lists.get(key)
        held, known = last if last is not None else ((), [])
        count = len(messages)
        # map stops at the shorter list: every message of the shorter one is compared.
        if last is None or not all(map(is_, messages, held)):
            known = []
        elif count <= len(held):
            return known[:count]
        found = [*known, *compute(messages[len(known) :])]
        if count <= self.max_messages:
            self._store(key, list(messages), found[:])
        return found

    def _store(self, key: tuple[int, Hashable], messages: list[object], found: list[V]) -> None:
        with self._lock:
            old = self._lists.pop(key, None)
            self._held += len(messages) - (0 if old is None else len(old[0]))
            self._lists[key] = (messages, found)
            while len(self._lists) > self.max_lists or self._held > self.max_messages:
                _, (dropped, _) = self._lists.popitem(last=False)
                self._held -= len(dropped)
