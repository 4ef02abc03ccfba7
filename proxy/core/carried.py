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
from collections.abc import Callable, Hashable, Sequence, Sized
from operator import is_
from typing import Generic, NamedTuple, Protocol, TypeVar

V = TypeVar("V")
M = TypeVar("M")
# Carrying pays past a few messages: a shorter list is computed whole (and its caller does not
# enter this module: a plain small request does not).
CARRY_FROM = 8


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

    def __len__(self) -> int:
        return len(self._values)

    @property
    def messages(self) -> int:
        """The messages the values hold, all told."""
        return self._messages

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


class _Kept(NamedTuple, Generic[V]):
    """A list carried: its messages (a private copy) and a value for each."""

    messages: list[object]
    values: list[V]


class Carried(Generic[V]):
    """Values computed for each message of a list, carried to the next list that begins with
    the same message objects (under the same ``tag``: an encoding, say); the caller computes
    the values of the messages past ``known`` and ``keep``s the whole."""

    def __init__(self, max_lists: int = 64, max_messages: int = 1 << 17) -> None:
        self.max_lists = max_lists
        self.max_messages = max_messages
        self._lists: Held[_Kept[V]] = Held(max_lists, max_messages)

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
                self._lists.put((id(messages[0]), tag), _Kept(held, kept[:]))


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
