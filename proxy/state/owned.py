"""A small value kept per conversation beside its record (its ledger, its originals): under a
key derived from the tenant and the conversation, sealed with that key as associated data,
bound to its owner (a value of another owner reads as absent), with the store's TTL, changed
by compare-and-set. ``proxy.state.ledgers`` and ``proxy.state.originals`` say what they keep."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

import orjson

from proxy import wirejson
from proxy.state.resilient import ResilientBackend
from proxy.state.sealing import MAGIC, Sealer, SealError
from proxy.state.store.base import Backend
from proxy.state.tenancy import Tenancy

log = logging.getLogger("proxy.store.conversations")

CAS_ATTEMPTS = 16
# Objects this process last wrote, by key: a ledger is a few KB written after every answer.
KEPT_OBJECTS = 256
T = TypeVar("T")
V = TypeVar("V")
# raw value (None: absent) -> (the sealed value to write, or None to write nothing; the result)
Step = Callable[[bytes | None], tuple[bytes | None, T]]
JsonObject = dict[str, Any]  # a value kept as one JSON object
# the stored object (None: none yet, or unreadable) -> the one to store (a new object: the
# one given is never changed)
ObjectEdit = Callable[[JsonObject | None], JsonObject]


def _loads(plain: bytes) -> Any:
    """JSON by orjson; by the standard library what orjson refuses (a lone surrogate a client
    sent as its model's name, which ``wirejson.encode`` wrote escaped)."""
    try:
        return orjson.loads(plain)
    except orjson.JSONDecodeError:
        return json.loads(plain)


class OwnedValues:
    """The keeping of one kind of value (``field`` names it inside the sealed JSON)."""

    field = "value"

    def __init__(
        self, calls: ResilientBackend, *, tenancy: Tenancy, sealer: Sealer, ttl_ms: int
    ) -> None:
        self._calls = calls
        self._tenancy = tenancy
        self._sealer = sealer
        # Without keys a value is kept as it is, so only a sealed one (met after the keys were
        # removed: the sealer says so) is handed to the sealer; decided once.
        self._plain = not sealer.enabled
        self._ttl_ms = ttl_ms
        # key -> (the bytes last written there, their owner, the object they encode): the
        # object stored by this process is edited again without decoding it back (see _stored).
        self._written: KeptDecoded[JsonObject] = KeptDecoded(KEPT_OBJECTS)

    def _open(self, key: str, owner: str, raw: bytes | None) -> Any:
        """The value stored under ``key`` for ``owner``; None when absent, unreadable or
        another owner's."""
        if raw is None:
            return None
        try:
            plain = raw
            if not self._plain or raw.startswith(MAGIC):
                plain = self._sealer.open(raw, context=key.encode())
            data = _loads(plain)
        except (SealError, ValueError) as exc:
            log.warning("ignoring an unreadable stored %s: %s", self.field, exc)
            return None
        if not isinstance(data, Mapping) or data.get("owner") != owner:
            return None
        return data.get(self.field)

    def _open_object(self, key: str, owner: str, raw: bytes | None) -> JsonObject | None:
        """The value as a JSON object; None when absent, unreadable, another owner's or not an
        object."""
        value = self._open(key, owner, raw)
        return dict(value) if isinstance(value, Mapping) else None

    def _seal(self, key: str, owner: str, value: Any) -> bytes:
        # orjson through wirejson: a ledger carries the console's timeline (a few KB, written
        # after every answer), where the standard library's json costs ten times more.
        plain = wirejson.encode({"owner": owner, self.field: value})
        return plain if self._plain else self._sealer.seal(plain, context=key.encode())

    def _object_step(self, key: str, owner: str, edit: ObjectEdit) -> Step[JsonObject]:
        """The step of a value kept as one JSON object that ``edit`` changes (the edit is its
        owner's: a pure function of the stored object, which this layer only runs)."""

        def step(raw: bytes | None) -> tuple[bytes, JsonObject]:
            updated = edit(self._stored(key, owner, raw))
            sealed = self._seal(key, owner, updated)
            self._written.put(key, owner, sealed, updated)
            return sealed, updated

        return step

    def _stored(self, key: str, owner: str, raw: bytes | None) -> JsonObject | None:
        """``_open_object`` of ``raw``; when ``raw`` is the very bytes this process sealed for
        ``owner`` under ``key`` (no other writer since), the object they encode, undecoded.

        The same bytes always open to the same object, so this is exactly ``_open_object``
        for values that round-trip through JSON (what an edit writes: str keys, lists, numbers,
        strings): the sealed bytes carry a fresh nonce, the plain ones their whole content.
        Edits are pure (they build a new object and change none they are given), so the kept
        one is handed over as it is, never changed: an edit may know it by its identity (the
        books read it once, ``proxy.compaction.money.books.KnownEntries``).
        """
        kept = None if raw is None else self._written.get(key, owner, raw)
        return kept if kept is not None else self._open_object(key, owner, raw)

    def _changing(
        self, key: str, step: Step[T], *, otherwise: T
    ) -> Callable[[Backend], Awaitable[T]]:
        """A write of ``key`` by compare-and-set: ``step`` sees the stored bytes and says what
        to write; retried (with jitter) while another writer wins, ``otherwise`` if it never does."""

        async def write(backend: Backend) -> T:
            for attempt in range(CAS_ATTEMPTS):
                raw = await backend.get(key)
                sealed, result = step(raw)
                if sealed is None:
                    return result
                if await backend.compare_and_set(key, raw, sealed, ttl_ms=self._ttl_ms):
                    return result
                await asyncio.sleep(random.uniform(0, min(0.001 * 2**attempt, 0.02)))
            return otherwise

        return write


class KeptDecoded(Generic[V]):
    """Values lately decoded from (or encoded into) stored bytes, by key, each with the exact
    bytes and the owner it stands for: the same bytes under the same key and owner decode alike,
    so a value read again unchanged is not decoded again. Least recently used dropped first,
    bounded by keys and by the bytes held. Used on the event loop only (no lock)."""

    def __init__(self, max_keys: int, max_bytes: int = 8 << 20) -> None:
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, tuple[bytes, str, V]] = OrderedDict()
        self._bytes = 0

    def get(self, key: str, owner: str, raw: bytes) -> V | None:
        """The value ``raw`` decodes to for ``owner``, if these very bytes were kept under ``key``."""
        kept = self._kept.get(key)
        if kept is None or kept[1] != owner or kept[0] != raw:
            return None
        self._kept.move_to_end(key)
        return kept[2]

    def put(self, key: str, owner: str, raw: bytes, value: V) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= len(old[0])
        if len(raw) > self.max_bytes:
            return
        self._kept[key] = (raw, owner, value)
        self._bytes += len(raw)
        while len(self._kept) > self.max_keys or self._bytes > self.max_bytes:
            _, (dropped, _, _) = self._kept.popitem(last=False)
            self._bytes -= len(dropped)
