"""``memory://``: the embedded backend, in-process, bounded (least recently used go) with TTLs.

Single-threaded asyncio makes each method atomic (none awaits inside), which gives the same
compare-and-set and lock guarantees as the Redis scripts within one process. It also serves as the
Redis backend's in-process fallback during an outage.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from proxy.state.store.base import IndexEntry

_FOREVER_MS = 100 * 365 * 24 * 3600 * 1000


class MemoryBackend:
    name = "memory"

    def __init__(
        self, *, max_keys: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_keys = max_keys
        self._clock = clock
        self._values: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        # Locks live apart from values so that a crowd of records can never evict a held lock.
        self._locks: dict[str, tuple[str, float]] = {}
        # The listing indexes: index key -> (member -> score), and when each index expires.
        self._indexes: dict[str, dict[str, float]] = {}
        self._index_expiry: dict[str, float] = {}

    def _live(self, key: str) -> tuple[bytes, float] | None:
        entry = self._values.get(key)
        if entry is not None and entry[1] <= self._clock():
            del self._values[key]
            return None
        return entry

    def _put(self, key: str, value: bytes, ttl_ms: int) -> None:
        self._values[key] = (value, self._clock() + ttl_ms / 1000)
        self._values.move_to_end(key)
        while len(self._values) > self._max_keys:
            self._values.popitem(last=False)

    async def get(
        self, key: str, *, ttl_ms: int | None = None, touch: IndexEntry | None = None
    ) -> bytes | None:
        if touch is not None:
            members = self._index(touch.index)
            if touch.member in members:
                members[touch.member] = touch.score
                self._index_expiry[touch.index] = self._clock() + touch.ttl_ms / 1000
        entry = self._live(key)
        if entry is None:
            return None
        if ttl_ms is not None:
            self._put(key, entry[0], ttl_ms)
        return entry[0]

    async def get_many(self, keys: list[str]) -> list[tuple[bytes | None, int | None]]:
        return [((await self.get(key)), (await self.ttl_ms(key))) for key in keys]

    def _index(self, index: str) -> dict[str, float]:
        if self._index_expiry.get(index, float("inf")) <= self._clock():
            self._indexes.pop(index, None)
            self._index_expiry.pop(index, None)
        return self._indexes.get(index, {})

    async def index_add(self, entry: IndexEntry) -> None:
        members = self._index(entry.index)
        if not members:
            if len(self._indexes) >= self._max_keys:  # one per tenant with records: bounded
                oldest = next(iter(self._indexes))
                del self._indexes[oldest]
                self._index_expiry.pop(oldest, None)
            self._indexes[entry.index] = members
        members[entry.member] = entry.score
        self._index_expiry[entry.index] = self._clock() + entry.ttl_ms / 1000
        if entry.limit and len(members) > entry.limit:
            for member in sorted(members, key=members.__getitem__)[: len(members) - entry.limit]:
                del members[member]

    async def index_page(
        self, index: str, *, before: float | None, limit: int
    ) -> list[tuple[str, float]]:
        members = self._index(index)
        newest = sorted(members.items(), key=lambda item: item[1], reverse=True)
        return [item for item in newest if before is None or item[1] < before][:limit]

    async def index_remove(self, index: str, members: list[str]) -> None:
        held = self._index(index)
        for member in members:
            held.pop(member, None)

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes, *, ttl_ms: int
    ) -> bool:
        entry = self._live(key)
        if (entry[0] if entry else None) != expected:
            return False
        self._put(key, value, ttl_ms)
        return True

    async def delete(self, key: str) -> bool:
        existed = self._live(key) is not None
        self._values.pop(key, None)
        return existed

    async def acquire(self, key: str, token: str, *, ttl_ms: int) -> bool:
        now = self._clock()
        held = self._locks.get(key)
        if held is not None and held[1] > now:
            return False
        if len(self._locks) > self._max_keys:
            self._locks = {k: v for k, v in self._locks.items() if v[1] > now}
        self._locks[key] = (token, now + ttl_ms / 1000)
        return True

    async def release(self, key: str, token: str) -> bool:
        held = self._locks.get(key)
        if held is None or held[0] != token or held[1] <= self._clock():
            return False
        del self._locks[key]
        return True

    async def set_forever(self, key: str, value: bytes, *, only_if_absent: bool) -> bytes:
        entry = self._live(key)
        if entry is None or not only_if_absent:
            self._put(key, value, _FOREVER_MS)
            return value
        return entry[0]

    async def scan(self, prefix: str, *, limit: int) -> list[str]:
        keys = [k for k in list(self._values) if k.startswith(prefix) and self._live(k)]
        return keys[:limit]

    async def ttl_ms(self, key: str) -> int | None:
        entry = self._live(key)
        return None if entry is None else max(0, int((entry[1] - self._clock()) * 1000))

    async def ping(self) -> None:
        return None

    def clear(self) -> None:
        """Forget every value (not the locks): the fallback's state is stale once Redis is back."""
        self._values.clear()
        self._indexes.clear()

    async def aclose(self) -> None:
        self._values.clear()
        self._locks.clear()
        self._indexes.clear()
