"""What is known about one message, cached by its exact content: that it passed validation, its
token count per encoding and its chain digest (one dict lookup on a later turn, not a
validation, a tokenization and a SHA-256 of its text).

The key is exact, never a hash standing for the message (``message_key``): the common shapes
by the tuple of their strings, any other by its canonical JSON, so two messages that differ in
anything validated, counted or hashed never share an entry (the checkpoint chain's promise). The
price is memory: the cache holds the text of the messages it knows, bounded by entries and
characters.

Within one request the same message objects are looked at several times (validation, the chain,
the planner's counts): a ``RequestFacts`` (``FactCache.request()``) remembers them by identity,
so only the first look computes a key (nothing may change them meanwhile; a parsed body never).

Across requests a conversation sends its history again with messages appended. A body followed
from the last one (``proxy.core.resent``) carries the facts of the items it took, the same
objects (``carry``). Any other first look follows the last history that began with the same two
messages (when long enough to pay for it), through a private copy of each message of a fast
shape: a message equal to its copy has that very key (a string equals only a string, None only
None), so it takes the copy's facts after one comparison; from the first that differs on, keys
are built as usual. The copies are bounded by histories and characters (half of the cache's).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Sequence
from operator import attrgetter, is_
from typing import Any, NamedTuple

from proxy import wirejson
from proxy.core.digests import DIALECT_FIELD, message_digest
from proxy.core.message_copies import private_copy
from proxy.types import MessageView

_EVICT_TO = 0.75  # share of the bounds kept when the cache is trimmed
_ANCHOR = 2  # the messages that name a history to follow (keyed as any other)
# A history is followed (copied, then compared next time) only past either bound, counted after
# its first two messages: below both, keys cost less than copies (2.8 against 3.9 us for three).
_FOLLOW_MESSAGES = 5
_FOLLOW_CHARS = 2048
_SIZE = attrgetter("size")
_CARRIED_BY_KEY = 8  # a list this short, not of the longest, costs less by key than by identity

_PLAIN = frozenset({"role", "content", "name", "tool_call_id"})
_WITH_CALLS = frozenset({"role", "content", "tool_calls"})
_CALL = frozenset({"id", "type", "function"})
_FUNCTION = frozenset({"name", "arguments"})
# Tags start the keys of the other shapes; a plain key has four items, so none can meet another.
_CALLS_TAG = "\x00calls"
_OTHER_TAG = "\x00json"


class Facts:
    """One message's cached facts, filled in by whoever needs them first."""

    __slots__ = ("digest", "pins", "size", "tokens", "used", "valid")

    def __init__(self, size: int) -> None:
        self.valid = False  # passed proxy.core.messages.validate_messages
        self.tokens: dict[str, int] = {}  # encoding name -> the message's tokens
        self.digest: bytes | None = None  # proxy.core.digests.message_digest
        # (pin expressions, turn, tool) -> whether they pin it (proxy.core.pins)
        self.pins: dict[Hashable, bool] | None = None
        self.size = size  # characters its key holds (the cache's memory bound)
        self.used = 0  # when it was last looked up (the cache's clock)


class _Lookups:
    """What a cache or a request's view of it answers (both share ``digests``)."""

    __slots__ = ()

    def scan(self, messages: Sequence[Any]) -> list[Facts]:
        raise NotImplementedError

    def carry(self, messages: Sequence[Any], known: list[Facts]) -> list[Facts]:
        """``scan(messages)``; their first ``len(known)``, unchanged since an earlier request
        scanned them (a parsed body's taken items), have the facts ``known``."""
        return self.scan(messages)

    def digests(self, messages: Sequence[MessageView]) -> list[bytes]:
        """Each message's digest in the checkpoint chain, computed once per distinct message."""
        out = []
        for message, facts in zip(messages, self.scan(messages), strict=True):
            digest = facts.digest
            if digest is None:
                digest = facts.digest = message_digest(message)
            out.append(digest)
        return out


class FactCache(_Lookups):
    """Facts per message, least recently used dropped first (in batches). Safe to share with
    worker threads: dict operations are atomic, changes of size made under a lock, and a lost
    race costs a recount, never a wrong fact."""

    def __init__(
        self, *, max_entries: int = 16_384, max_chars: int = 64 << 20, max_histories: int = 64
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.max_histories = max_histories
        self._entries: dict[Hashable, Facts] = {}
        self._chars = 0
        self._clock = 0
        self._lock = threading.Lock()
        # The facts of a history's first two messages -> the last history that began with them.
        self._histories: OrderedDict[tuple[Facts, Facts], _History] = OrderedDict()
        self._history_chars = 0
        # The facts carried lately (``RequestFacts.carry``) with the clock they were carried at:
        # stamped as used when the cache is trimmed, not each time (a pass over a long history).
        self._carried: deque[tuple[int, list[Facts]]] = deque(maxlen=max_histories)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        """Characters of message text held now."""
        return self._chars

    @contextlib.contextmanager
    def request(self) -> Iterator[RequestFacts]:
        """A view for one request: a message looked up once through it is found by identity."""
        view = RequestFacts(self)
        try:
            yield view
        finally:
            view.close()

    def scan(self, messages: Sequence[Any]) -> list[Facts]:
        """The facts of each message, in order (entries made for messages not seen before)."""
        return self._lookup(messages, None, None)

    def _lookup(
        self, messages: Sequence[Any], seen: dict[int, Facts] | None, held: list[Any] | None
    ) -> list[Facts]:
        self._clock += 1
        clock = self._clock
        entries = self._entries
        out = []
        for message in messages:
            if seen is not None:
                facts = seen.get(id(message))
                if facts is not None:
                    out.append(facts)
                    continue
            key = message_key(message)
            facts = entries.get(key) or self._add(key)
            facts.used = clock
            if seen is not None and held is not None:
                seen[id(message)] = facts
                held.append(message)
            out.append(facts)
        return out

    def _follow(
        self, messages: Sequence[Any], seen: dict[int, Facts], held: list[Any]
    ) -> list[Facts]:
        """A request's first look at a history: ``_lookup``, but the messages equal to the last
        history begun by the same two take its facts by comparison (module docstring); this one
        is followed next when long enough to pay for its copies (``_FOLLOW_MESSAGES``, chars)."""
        out = self._lookup(messages[:_ANCHOR], seen, held)
        anchor = (out[0], out[1])
        clock = self._clock
        copies: list[Any] = [None] * _ANCHOR
        start = _ANCHOR
        last = self._histories.get(anchor)
        if last is not None:
            end = min(len(messages), len(last.copies))
            # Most requests send the last history again with messages appended: compared as one
            # list first (in C), then, when one differs or has no copy, message by message.
            followed = last.copies[start:end]
            if end > start and None not in followed and messages[start:end] == followed:
                found = last.facts[start:end]
                for facts in found:
                    facts.used = clock
                _adopt(messages[start:end], found, seen, held)
                out.extend(found)
                start = end
            while start < end:
                message, copy = messages[start], last.copies[start]
                if copy is None or message != copy:
                    break
                facts = last.facts[start]
                facts.used = clock
                seen[id(message)] = facts
                held.append(message)
                out.append(facts)
                start += 1
            copies = last.copies[:start]
        entries = self._entries
        keys = []
        for message in messages[start:]:
            key = message_key(message)
            facts = seen.get(id(message)) or entries.get(key) or self._add(key)
            facts.used = clock
            seen[id(message)] = facts
            held.append(message)
            out.append(facts)
            keys.append(key)
        chars = sum(map(_SIZE, out))
        if (
            len(messages) - _ANCHOR >= _FOLLOW_MESSAGES
            or chars - out[0].size - out[1].size >= _FOLLOW_CHARS
        ):
            copies += map(private_copy, messages[start:], keys)
            self._remember(anchor, _History(copies, out, chars))
        return out

    def _remember(self, anchor: tuple[Facts, Facts], history: _History) -> None:
        bound = self.max_chars // 2
        with self._lock:
            old = self._histories.pop(anchor, None)
            if old is not None:
                self._history_chars -= old.chars
            if history.chars > bound or self.max_histories <= 0:
                return
            self._histories[anchor] = history
            self._history_chars += history.chars
            while len(self._histories) > self.max_histories or self._history_chars > bound:
                _, dropped = self._histories.popitem(last=False)
                self._history_chars -= dropped.chars

    def _add(self, key: Hashable) -> Facts:
        facts = Facts(key_size(key))
        with self._lock:
            known = self._entries.setdefault(key, facts)
            if known is not facts:  # added meanwhile by another thread
                return known
            self._chars += facts.size
            if len(self._entries) > self.max_entries or self._chars > self.max_chars:
                self._trim()
        return facts

    def _trim(self) -> None:
        """Drop the least recently used down to ``_EVICT_TO`` of both bounds (sorted once a batch)."""
        for clock, carried in tuple(self._carried):  # a copy: other threads carry meanwhile
            for facts in carried:
                if facts.used < clock:
                    facts.used = clock
        entries = self._entries
        by_age = sorted(entries.items(), key=lambda item: item[1].used)
        keep_entries = int(self.max_entries * _EVICT_TO)
        keep_chars = int(self.max_chars * _EVICT_TO)
        for key, facts in by_age:
            if len(entries) <= keep_entries and self._chars <= keep_chars:
                break
            del entries[key]
            self._chars -= facts.size


class RequestFacts(_Lookups):
    """One request's view of a ``FactCache``: id -> facts of the message objects looked up so
    far (held, so that no other object takes one of their ids meanwhile). A request looks at its
    history several times (validation, the chain, the counts, recall's notes), the same objects
    or a prefix of them: the longest list looked at is kept with its facts, and a list of those
    very objects, in order, gets them back after one comparison of identities."""

    __slots__ = ("_carried", "_held", "_longest", "_seen", "cache")

    def __init__(self, cache: FactCache) -> None:
        self.cache = cache
        self._seen: dict[int, Facts] | None = {}
        self._held: list[Any] = []
        # A private copy of the longest list looked at (a caller may change its list), its facts.
        self._longest: tuple[list[Any], list[Facts]] | None = None
        # Messages carried in, with their facts: ``_seen`` takes them only when a long list asks.
        self._carried: tuple[list[Any], list[Facts], int] | None = None  # the first of longest

    def scan(self, messages: Sequence[Any]) -> list[Facts]:
        """As ``FactCache.scan``; a message seen through this view costs a lookup by identity,
        the first look at a history follows the last one that began like it (``_follow``), and
        a prefix of the longest list looked at costs a comparison of identities."""
        seen = self._seen
        if seen is None:  # closed: the cache itself
            return self.cache._lookup(messages, None, None)
        longest = self._longest
        count = len(messages)
        # map stops at the shorter list: with count <= len(longest), every message is compared.
        if longest is not None and count <= len(longest[0]) and all(map(is_, messages, longest[0])):
            return longest[1][:count]
        carried = self._carried  # a short list (a summary's head) is looked up by key instead
        if carried is not None and count > _CARRIED_BY_KEY:
            held, facts, carried_count = carried
            _adopt(held[:carried_count], facts[:carried_count], seen, self._held)
            self._carried = carried = None
        if not self._held and carried is None and count > _ANCHOR:
            found = self.cache._follow(messages, seen, self._held)
        else:
            found = self.cache._lookup(messages, seen, self._held)
        if longest is None or count > len(longest[0]):
            self._longest = (list(messages), found[:])
        return found

    def carry(self, messages: Sequence[Any], known: list[Facts]) -> list[Facts]:
        seen, count = self._seen, len(known)
        if seen is None or self._held or self._carried or not 0 < count <= len(messages):
            return self.scan(messages)  # closed, or looked at already: the usual way
        cache = self.cache
        cache._carried.append((cache._clock, known))  # used now, as a lookup would stamp them
        found = [*known, *cache._lookup(messages[count:], seen, self._held)]
        held = list(messages)  # private copies: the caller may change its lists
        self._longest = (held, found[:])
        self._carried = (held, self._longest[1], count)  # read before ``_longest`` changes
        return found

    def close(self) -> None:
        # Whatever keeps the view after the request (a task made during it) must not keep the
        # request's messages alive, nor memo new ones.
        self._seen = None
        self._held = []
        self._longest = None
        self._carried = None


class _History(NamedTuple):
    """A history as sent: a private copy of each message of a fast shape (else None), facts, size."""

    copies: list[Any]
    facts: list[Facts]
    chars: int


def _adopt(
    messages: Sequence[Any], found: list[Facts], seen: dict[int, Facts], held: list[Any]
) -> None:
    """``messages`` (objects unchanged since they were looked up) take ``found``, their facts."""
    seen.update(zip(map(id, messages), found, strict=True))
    held.extend(messages)


def key_size(key: Hashable) -> int:
    """The characters ``key`` holds (what the cache's memory bound counts)."""
    if isinstance(key, tuple):
        return sum(len(part) for part in key if isinstance(part, str | bytes))
    return 0


def message_key(message: Any) -> Hashable:
    """An exact key of everything validated, counted or hashed in ``message``.

    In the fast shapes None stands only for an absent field (or a null ``content``, which
    validation, counting and the chain treat as an absent one); a field of any other type or a
    null one sends the message to the canonical JSON key, which tells every JSON value apart
    (``1``, ``1.0``, ``true``). An adapter's private fields (``_wire``) stay out of the key (they
    are neither validated, counted nor hashed), except the hashed ``_hash``."""
    if type(message) is not dict:
        return (_OTHER_TAG, wirejson.canonical(message))
    get = message.get
    content, role = get("content"), get("role")
    if (content is None or type(content) is str) and type(role) is str:
        keys = message.keys()
        if keys <= _PLAIN:
            name, call_id = get("name"), get("tool_call_id")
            if (
                (name is None or type(name) is str)
                and (call_id is None or type(call_id) is str)
                and len(message)
                == 1 + ("content" in message) + (name is not None) + (call_id is not None)
            ):
                return (role, content, name, call_id)
        elif keys <= _WITH_CALLS:
            key = _calls_key(role, content, get("tool_calls"))
            if key is not None:
                return key
    fields = {k: v for k, v in message.items() if k[:1] != "_" or k == DIALECT_FIELD}
    return (_OTHER_TAG, wirejson.canonical(fields))


def _calls_key(role: str, content: str | None, calls: object) -> tuple[str | None, ...] | None:
    """The key of ``{role, content, tool_calls}`` when every call is ``{id, type?, function:
    {name, arguments}}`` of strings; else None."""
    if type(calls) is not list:
        return None
    key: list[str | None] = [_CALLS_TAG, role, content]
    for call in calls:
        if type(call) is not dict or not call.keys() <= _CALL:
            return None
        function = call.get("function")
        if type(function) is not dict or len(function) != 2 or not function.keys() <= _FUNCTION:
            return None
        call_id, kind = call.get("id"), call.get("type")
        name, arguments = function.get("name"), function.get("arguments")
        if not (
            type(call_id) is str
            and type(name) is str
            and type(arguments) is str
            and (type(kind) is str if len(call) == 3 else kind is None and len(call) == 2)
        ):
            return None
        key += (call_id, kind, name, arguments)
    return tuple(key)


# What the chain, validation and counting accept: the shared cache, or a request's view of it.
FactLookup = FactCache | RequestFacts
