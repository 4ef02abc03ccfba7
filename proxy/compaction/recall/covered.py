"""What a summary covers, as recall's pieces, remembered across the requests that send the
summary (``CoveredPieces``), with the short index the summary message ends with."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from proxy.config.recall import RecallSettings
from proxy.core.carried import CARRY_FROM, Carried
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


class Covered:
    """What a summary covers, as pieces, with its index made once per ``index_entries`` and
    tool name (every request that sends the summary sends the same index)."""

    __slots__ = ("_indexes", "chars", "ids", "pieces", "serial")

    def __init__(self, pieces: list[Piece], ids: frozenset[str] = frozenset()) -> None:
        self.pieces = pieces
        self.ids = ids  # the call ids its segments looked up
        self.chars = sum(len(p.text) for p in pieces)
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
    the next one, those messages with a tool round appended, checks only the round."""

    def __init__(self, *, max_entries: int = 256, max_chars: int = 64 << 20) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: OrderedDict[Hashable, Covered] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self._checked: Carried[None] = Carried()  # later messages with none of an entry's ids

    def get(self, key: Hashable, later: list[ChatMessage]) -> Covered | None:
        found = self._entries.get(key)
        if found is None:
            return None
        ids = found.ids
        if ids and later:
            long = len(later) >= CARRY_FROM
            checked = len(self._checked.known(later, found.serial)) if long else 0
            for message in later[checked:] if checked else later:
                calls = message.get("tool_calls")
                if isinstance(calls, list) and any(
                    isinstance(c, dict) and str(c.get("id")) in ids for c in calls
                ):
                    return None
            if long:
                self._checked.keep(later, [None] * len(later), found.serial)
        with self._lock, contextlib.suppress(KeyError):  # dropped meanwhile: found all the same
            self._entries.move_to_end(key)  # the key is long: hashed once more, not twice
        return found

    def put(self, key: Hashable, covered: Covered) -> None:
        if covered.chars > self.max_chars:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= old.chars
            self._entries[key] = covered
            self._chars += covered.chars
            while len(self._entries) > self.max_entries or self._chars > self.max_chars:
                _, dropped = self._entries.popitem(last=False)
                self._chars -= dropped.chars


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
