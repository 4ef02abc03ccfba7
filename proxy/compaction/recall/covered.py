"""What a summary covers, as recall's pieces, remembered across the requests that send the
summary (``CoveredPieces``), with the short index the summary message ends with."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import islice
from operator import is_
from typing import NamedTuple

from proxy.config.recall import RecallSettings
from proxy.core.carried import CARRY_FROM, Carried, Held
from proxy.core.summary_message import escape_tags
from proxy.types import ChatMessage

_INDEX_MAX_CHARS = 2000  # the index stays short (~500 tokens) whatever index_entries says
_SERIALS = itertools.count()


@dataclass(frozen=True)
class Piece:
    """One thing the plan removed: its handle, a one-line label, and its full text."""

    handle: str
    label: str
    text: str


def handle_of(salt: str, kind: str, text: str) -> str:
    """A short handle (``r`` + 10 base32 characters, 50 bits) for ``text`` in one conversation."""
    digest = hashlib.blake2b(
        f"{kind}\x00{text}".encode("utf-8", "surrogatepass"), key=salt.encode()[:64], digest_size=8
    ).digest()
    return "r" + base64.b32encode(digest).decode().lower()[:10]


class Covered:
    """What a summary covers, as pieces, with its index made once per ``index_entries`` and
    tool name (every request that sends the summary sends the same index)."""

    __slots__ = ("_indexes", "by_handle", "chars", "firsts", "ids", "pieces", "serial")

    def __init__(
        self,
        pieces: list[Piece],
        ids: frozenset[str] = frozenset(),
        firsts: list[int] | None = None,
    ) -> None:
        self.pieces = pieces
        self.ids = ids  # the call ids its segments looked up
        self.firsts = firsts or []  # where each piece's messages begin, when known
        self.chars = sum(len(p.text) for p in pieces)
        # Handle -> piece, the first of a handle kept: what a request refers to. Never changed
        # (shared by the notes of every request that sends the summary).
        self.by_handle: dict[str, Piece] = {}
        for piece in pieces:
            self.by_handle.setdefault(piece.handle, piece)
        self._indexes: dict[tuple[int, str], str] = {}
        self.serial = next(_SERIALS)  # names it, unlike its id, once it is dropped too

    def index(self, settings: RecallSettings) -> str:
        key = (settings.index_entries, settings.tool_name)
        text = self._indexes.get(key)
        if text is None:
            text = self._indexes[key] = _index(self.pieces, settings)
        return text


class CoveredPieces:
    """What a summary covers, as pieces, remembered across requests: every turn until the next
    summary sends the same covered messages, whose segments would otherwise be rebuilt and
    hashed again from the whole transcript each time. Bounded by entries and by characters
    held; safe to share with worker threads (changes under a lock).

    Keyed by the facts (``proxy.core.facts``) of the messages up to the cut: one facts object
    stands for one exact message content, so the key is exact, never a hash standing for the
    messages. A segment also names the calls its messages refer to, looked up by id in the whole
    list: an entry is used only when no later message has a call of one of those ids. The later
    messages of the last request checked against an entry are carried (``proxy.core.carried``):
    the next one, those messages with a tool round appended, checks only the round.

    The last entry of each history is also carried by the identity of its messages
    (``held``): the next request that sends those very objects, a round appended, finds it
    with the round alone checked, no key made of the whole prefix; and a next summary that
    covers more of them (``base``) packs only from the last segment on (packing from the start
    is stable). Bounded by histories and by the messages they hold."""

    def __init__(
        self,
        *,
        max_entries: int = 256,
        max_chars: int = 64 << 20,
        max_held: int = 64,
        max_held_messages: int = 1 << 17,
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: OrderedDict[Hashable, Covered] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self._checked: Carried[None] = Carried()  # later messages with none of an entry's ids
        self._held: Held[_Held] = Held(max_held, max_held_messages)  # one per history

    def get(self, key: Hashable, later: list[ChatMessage]) -> Covered | None:
        found = self._entries.get(key)
        if found is None or not self._unused(found, later):
            return None
        with self._lock, contextlib.suppress(KeyError):  # dropped meanwhile: found all the same
            self._entries.move_to_end(key)  # the key is long: hashed once more, not twice
        return found

    def held(self, source: list[ChatMessage], end: int, tag: Hashable) -> Covered | None:
        """The entry of ``source[:end]`` held for these very message objects (``hold``), when
        no later message has a call of one of its ids (those held were checked already)."""
        if not end:
            return None
        key = (id(source[0]), tag)
        found = self._held.get(key)
        if found is None or found.end != end:
            return None
        checked = found.clean(source)
        if checked is None or calls_one_of(source[checked:], found.covered.ids):
            return None
        if checked < len(source):
            self._held.put(key, _Held(source[:], end, found.covered))
        return found.covered

    def base(
        self, source: list[ChatMessage], end: int, tag: Hashable
    ) -> tuple[Covered, int] | None:
        """(the entry held for fewer of these very messages, how many it covers): all its
        segments but the last are this one's too, when no message past them has a call of one
        of its ids (then every call they name is named the same here)."""
        found = self._held.get((id(source[0]), tag)) if end else None
        if found is None or found.end >= end or not found.covered.firsts:
            return None
        checked = found.clean(source)
        if checked is None or calls_one_of(source[checked:], found.covered.ids):
            return None
        return found.covered, found.end

    def hold(self, source: list[ChatMessage], end: int, tag: Hashable, covered: Covered) -> None:
        """Carry ``covered``, the entry of ``source[:end]`` whose later messages have none of
        its ids, to the next request that sends these message objects (an entry too big to be
        kept is not held either)."""
        if end and covered.chars <= self.max_chars:
            self._held.put((id(source[0]), tag), _Held(source[:], end, covered))

    def _unused(self, found: Covered, later: list[ChatMessage]) -> bool:
        """Whether no message of ``later`` has a call of one of ``found``'s ids."""
        ids = found.ids
        if ids and later:
            long = len(later) >= CARRY_FROM
            checked = len(self._checked.known(later, found.serial)) if long else 0
            if calls_one_of(later[checked:] if checked else later, ids):
                return False
            if long:
                self._checked.keep(later, [None] * len(later), found.serial)
        return True

    def put(self, key: Hashable, covered: Covered) -> None:
        if covered.chars > self.max_chars:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._drop(old)
            self._entries[key] = covered
            self._chars += covered.chars
            while len(self._entries) > self.max_entries or self._chars > self.max_chars:
                self._drop(self._entries.popitem(last=False)[1])

    def _drop(self, dropped: Covered) -> None:
        """Forget an entry taken out of ``_entries`` (under the lock): not held past it either,
        so the characters held stay within the bound."""
        self._chars -= dropped.chars
        self._held.drop(lambda held: held.covered is dropped)


class _Held(NamedTuple):
    """A history's entry: its messages (a private copy: the covered ones, then later ones none
    of whose calls has one of the entry's ids), how many it covers, the entry."""

    messages: list[ChatMessage]
    end: int
    covered: Covered

    def clean(self, source: list[ChatMessage]) -> int | None:
        """How many of ``source``'s first messages are these very objects, checked clean: all
        held, or the covered ones (a later one changed, or the list is shorter); None when
        ``source`` does not begin with the covered ones."""
        held = self.messages
        if len(held) <= len(source) and all(map(is_, held, source)):
            return len(held)
        if len(source) >= self.end and all(map(is_, islice(held, self.end), source)):
            return self.end
        return None


def calls_one_of(messages: list[ChatMessage], ids: frozenset[str]) -> bool:
    """Whether a message of ``messages`` has a call of one of ``ids``."""
    for message in messages:
        calls = message.get("tool_calls")
        if isinstance(calls, list) and any(
            isinstance(c, dict) and str(c.get("id")) in ids for c in calls
        ):
            return True
    return False


def _index(pieces: list[Piece], settings: RecallSettings) -> str:
    """The newest ``index_entries`` pieces, one line each, within ``_INDEX_MAX_CHARS``."""
    head = f"Recall index (the {settings.tool_name} tool returns any of these verbatim):"
    lines: list[str] = []
    size = len(head)
    for piece in reversed(pieces[-settings.index_entries :] if settings.index_entries else []):
        line = escape_tags(f"- {piece.handle}: {piece.label}, {len(piece.text):,} chars")
        if size + len(line) + 1 > _INDEX_MAX_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    left = len(pieces) - len(lines)
    tail = [f"- ({left} older entries not listed)"] if left else []
    return "\n".join([head, *reversed(lines), *tail])
