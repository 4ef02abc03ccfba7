"""The admin listing: each tenant's conversations, most recently used first.

Each tenant has an index (a sorted set of its record keys by last use, ``Tenancy.index_key``), so
listing never scans the keyspace. A write lists its record; a request's read moves it in the same
trip, as often as the read asks (``proxy.state.conversations``: at most once a minute per process);
members whose record expired or does not open as the tenant's are dropped from the index when a
page meets them. The index only serves the admin listing: it never
spends a write's time budget, and its failures never fail a request or a write.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from proxy.errors import StoreError
from proxy.state.records import SealedRecords
from proxy.state.resilient import ResilientBackend
from proxy.state.store.base import Backend, IndexEntry
from proxy.state.tenancy import Tenancy

# Reading a page is a few round trips (the page, the values, the stale members' removal).
_PAGE_TIMEOUT_FACTOR = 8


@dataclass(frozen=True)
class ConversationInfo:
    conversation_id: str
    checkpoints: int
    covered: int
    updated_at: float  # last written
    ttl_seconds: float | None
    last_used: float = 0.0  # last read by a request or written, seconds since the epoch
    bytes: int = 0  # the stored value's size


@dataclass(frozen=True)
class ConversationPage:
    conversations: list[ConversationInfo]
    next_before: float | None  # pass as ``before`` for the next page; None: this was the last


class Listing:
    """Keeps each tenant's listing index and reads pages of it."""

    def __init__(
        self,
        calls: ResilientBackend,
        records: SealedRecords,
        tenancy: Tenancy,
        *,
        ttl_ms: int,
        max_listed: int,
    ) -> None:
        self._calls = calls
        self._records = records
        self._tenancy = tenancy
        self._ttl_ms = ttl_ms
        self._max_listed = max_listed

    def on_read(self, tenant: str, key: str) -> IndexEntry:
        """The index entry a read of ``key`` moves in the same trip: its last use is now."""
        return self._entry(tenant, key)

    async def on_write(self, tenant: str, key: str) -> None:
        """After a write: the record is listed, newest first. Its own call, after the write's:
        the index only serves the admin listing, so it never spends the write's time budget,
        and a failure here never undoes or fails the write."""
        entry = self._entry(tenant, key, limit=self._max_listed)
        with contextlib.suppress(StoreError):
            await self._calls.call(lambda b: b.index_add(entry))

    def _entry(self, tenant: str, key: str, *, limit: int = 0) -> IndexEntry:
        """``key``'s place in the tenant's listing, as of now."""
        index = self._tenancy.index_key(tenant)
        return IndexEntry(index, key, time.time(), self._ttl_ms, limit)

    async def page(self, tenant: str, *, limit: int, before: float | None) -> ConversationPage:
        """The tenant's conversations, most recently used first, ``limit`` at a time from
        ``before`` (a page's ``next_before``); StoreError when the store cannot answer."""
        index = self._tenancy.index_key(tenant)

        async def collect(backend: Backend) -> ConversationPage:
            entries = await backend.index_page(index, before=before, limit=limit)
            values = await backend.get_many([key for key, _ in entries])
            infos, stale = [], []
            for (key, last_used), (raw, ttl) in zip(entries, values, strict=True):
                info = None if raw is None else self._listed(tenant, key, raw, ttl, last_used)
                if info is None:
                    stale.append(key)
                else:
                    infos.append(info)
            with contextlib.suppress(StoreError):
                await backend.index_remove(index, stale)
            more = len(entries) == limit
            return ConversationPage(infos, entries[-1][1] if more and entries else None)

        return await self._calls.call(collect, factor=_PAGE_TIMEOUT_FACTOR)

    def _listed(
        self, tenant: str, key: str, raw: bytes, ttl: int | None, last_used: float
    ) -> ConversationInfo | None:
        record = self._records.open(key, raw, owner=None)
        if record is None:
            return None
        named = self._tenancy.open_conversation_id(tenant, record.conversation_id, key=key)
        # The record names its conversation; it must be the one this key belongs to.
        if named is None or key != self._tenancy.record_key(tenant, named):
            return None
        if record.owner != self._tenancy.owner(tenant, named):
            return None
        return ConversationInfo(
            conversation_id=named,
            checkpoints=len(record.checkpoints),
            covered=record.depth,
            updated_at=record.updated_at,
            ttl_seconds=None if ttl is None else ttl / 1000,
            last_used=last_used,
            bytes=len(raw),
        )
