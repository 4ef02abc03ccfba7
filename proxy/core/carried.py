"""Per-message values of the last histories, carried to the next request that sends them again.

A conversation's next request sends its history again with a few messages appended, and the
messages taken from its last body are the very same Python objects (``proxy.core.resent``). A
value computed from a message alone (its tokens, its digest in the checkpoint chain), or from
the messages up to it (the running sum of their tokens), is then what it was: ``Carried``
keeps the values of the last lists it was given, found by their first message object, and a
list whose first messages are *those objects* (identity, compared in C, never equality:
``1 == True`` but they count and hash apart) gets their values back and computes only the
rest (``each``). Messages are never changed once parsed, and the list held keeps its
objects alive, so no other object can take one of their ids meanwhile. Only a request's
messages are carried (a parsed body is never changed): a caller's own list may change.

Values of several kinds kept together (``keep_each``: a history's counts and their running
sums) hold one copy of the list, and are found with one comparison (``known_each``).

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
# Carrying pays past a few messages: a shorter list is computed whole (and its caller does not
# enter this module: a plain small request does not).
CARRY_FROM = 8


class Carried(Generic[V]):
    """Values computed for each message of a list, carried to the next list that begins with
    the same message objects (under the same ``tag``: an encoding, say); the caller computes
    the values of the messages past ``known`` and ``keep``s the whole."""

    def __init__(self, max_lists: int = 64, max_messages: int = 1 << 17) -> None:
        self.max_lists = max_lists
        self.max_messages = max_messages
        self._lists: OrderedDict[tuple[int, Hashable], tuple[list[object], list[V]]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def known(self, messages: Sequence[object], tag: Hashable = None) -> list[V]:
        """The values of the first messages of ``messages`` (all, or as many as the last list
        held that are its very objects; none when it began otherwise): a new list."""
        last = self._lists.get((id(messages[0]), tag)) if messages else None
        if last is None:
            return []
        held, values = last
        # map stops at the shorter list: every message of the shorter one is compared.
        if not all(map(is_, messages, held)):
            return []
        return values[: len(messages)]

    def known_each(self, messages: Sequence[object], tags: Sequence[Hashable]) -> list[list[V]]:
        """``known`` under each tag; the objects are compared once for the values that were
        kept together (``keep_each``)."""
        first = id(messages[0]) if messages else 0
        compared: list[tuple[list[object], bool]] = []  # held here: no other list takes its id
        found: list[list[V]] = []
        for tag in tags:
            last = self._lists.get((first, tag)) if messages else None
            if last is None:
                found.append([])
                continue
            held, values = last
            same = next((same for other, same in compared if other is held), None)
            if same is None:
                same = all(map(is_, messages, held))
                compared.append((held, same))
            found.append(values[: len(messages)] if same else [])
        return found

    def keep(self, messages: Sequence[object], values: list[V], tag: Hashable = None) -> None:
        """Carry ``values``, one per message, to the next list that begins with these."""
        self.keep_each(messages, {tag: values})

    def keep_each(self, messages: Sequence[object], values: dict[Hashable, list[V]]) -> None:
        """``keep`` of the values under each tag, holding one copy of the list for all."""
        if messages and len(messages) <= self.max_messages and self.max_lists > 0:
            held = list(messages)
            for tag, kept in values.items():
                self._store((id(messages[0]), tag), held, kept[:])

    def _store(self, key: tuple[int, Hashable], messages: list[object], found: list[V]) -> None:
        with self._lock:
            old = self._lists.pop(key, None)
            self._held += len(messages) - (0 if old is None else len(old[0]))
            self._lists[key] = (messages, found)
            while len(self._lists) > self.max_lists or self._held > self.max_messages:
                _, (dropped, _) = self._lists.popitem(last=False)
                self._held -= len(dropped)


def each(
    carried: Carried[V] | None,
    messages: Sequence[M],
    tag: Hashable,
    value: Callable[[M], V],
) -> list[V]:
    """``value`` of each message: those of the messages the last list (under ``tag``) held
    taken from ``carried``, the rest computed (all of them without ``carried``, or for a list
    shorter than ``CARRY_FROM``). ``value`` must depend on the message alone."""
    if carried is None or len(messages) < CARRY_FROM:
        return [value(m) for m in messages]
    values = carried.known(messages, tag)
    if len(values) < len(messages):
        values += map(value, messages[len(values) :])
        carried.keep(messages, values, tag)
    return values
