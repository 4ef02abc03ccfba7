"""The small interface every store backend implements: bytes under keys, with TTLs.

Backends know nothing of checkpoints, tenants or encryption (``proxy.state.conversations`` and
its parts do); they move opaque values and guarantee the two atomic operations correctness rests
on: a compare-and-set write and a token lock. Every method raises ``StoreError`` (and nothing
else) when the backend fails; foreign exceptions are mapped where they occur.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One record's place in its tenant's listing index (a sorted set by last use)."""

    index: str  # the tenant's index key
    member: str  # the record's key: an HMAC, never a conversation id
    score: float  # last use, seconds since the epoch
    ttl_ms: int  # the index lives as long as its newest record
    limit: int = 0  # members kept (the least recently used drop out); 0 leaves the size alone


class Backend(Protocol):
    name: str

    async def get(
        self, key: str, *, ttl_ms: int | None = None, touch: IndexEntry | None = None
    ) -> bytes | None:
        """The value, or None. With ``ttl_ms`` the key's TTL is refreshed in the same trip; with
        ``touch`` so is the score of an index member that is already present."""
        ...

    async def get_many(self, keys: list[str]) -> list[tuple[bytes | None, int | None]]:
        """Each key's value and milliseconds left (None when absent), in one trip."""
        ...

    async def index_add(self, entry: IndexEntry) -> None:
        """Add or move ``entry.member``, then drop the lowest scores beyond ``entry.limit``."""
        ...

    async def index_page(
        self, index: str, *, before: float | None, limit: int
    ) -> list[tuple[str, float]]:
        """Up to ``limit`` members scored below ``before`` (all when None), highest first."""
        ...

    async def index_remove(self, index: str, members: list[str]) -> None: ...

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes, *, ttl_ms: int
    ) -> bool:
        """Write ``value`` only if the key still holds ``expected`` (None: absent)."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove the key; True if it existed."""
        ...

    async def acquire(self, key: str, token: str, *, ttl_ms: int) -> bool:
        """Take the lock ``key`` with ``token`` if nobody holds it."""
        ...

    async def release(self, key: str, token: str) -> bool:
        """Release the lock only if ``token`` still holds it (never someone else's)."""
        ...

    async def set_forever(self, key: str, value: bytes, *, only_if_absent: bool) -> bytes:
        """Store ``value`` with no TTL (only if the key is absent, when asked); return what the
        key holds then."""
        ...

    async def scan(self, prefix: str, *, limit: int) -> list[str]:
        """Up to ``limit`` keys starting with ``prefix``."""
        ...

    async def ttl_ms(self, key: str) -> int | None:
        """Milliseconds the key has left, or None when absent."""
        ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...
