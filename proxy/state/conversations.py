"""The conversation store the app uses: checkpoint records per tenant and conversation, fail-open.

One object over one backend (memory or Redis) that speaks in tenants, conversation ids and
checkpoints:

- ``load`` is the fast path: one backend read that also refreshes the TTL and, at most once a
  minute per conversation and process, moves it in the admin listing (``TOUCH_SECONDS``).
- ``add_checkpoint`` is a compare-and-set loop: a checkpoint is written only if it extends what is
  stored (``proxy.core.checkpoints.extend``), and a concurrent writer's checkpoint is never lost.
- ``acquire_lock``/``release_lock`` make summarization single-flight; correctness never rests on
  them, only duplicate summarizer cost does.
- The request path never sees a backend failure: it is a miss, or a call served in-process while
  Redis is away (``proxy.state.resilient``). Admin calls raise ``StoreError`` instead: an operator
  must know that a delete did not happen.

Its parts, each with one reason to change: ``resilient`` (timeouts, breaker, fallback, health),
``records`` (sealed, owner-bound values), ``listing`` (the admin listing's index) and ``secret``
(the tenant secret shared through Redis when none is configured).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from proxy.config.store import StoreSettings
from proxy.core.checkpoints import Checkpoint, Record, extend
from proxy.errors import PayloadTooLarge, StoreError
from proxy.state.counters import StoreCounters
from proxy.state.ledgers import Ledgers
from proxy.state.listing import ConversationPage, Listing
from proxy.state.originals import Originals
from proxy.state.owned import KeptDecoded
from proxy.state.records import SealedRecords
from proxy.state.resilient import ResilientBackend, StoreHealth
from proxy.state.sealing import Sealer
from proxy.state.secret import SharedSecret
from proxy.state.store.base import Backend
from proxy.state.store.breaker import CircuitBreaker
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy

log = logging.getLogger("proxy.store.conversations")

_CAS_ATTEMPTS = 64
# A compare-and-set loop is a few round trips; under contention it may take more than one call.
_WRITE_TIMEOUT_FACTOR = 8
_PRIMARY_LOCK = "r."
_FALLBACK_LOCK = "l."
# A request's read moves its conversation in the listing index at most this often per process:
# last use is listed to about a minute, and a busy agent run does not pay for the index on every
# request (the pipeline costs ~60 us more than a lone GETEX: tests/bench/bench_store.py). The read
# decides this itself: in between, it has nothing to ask of the listing.
TOUCH_SECONDS = 60.0
# The records last read, kept decoded: a conversation's record changes only when a summary is
# stored, yet every request of it reads it (bounded by records and by their stored bytes).
_OPENED_KEPT = 256
_TOUCHED_KEPT = 65_536


def _breaker_for(backend: Backend, settings: StoreSettings) -> CircuitBreaker | None:
    """The circuit breaker of a backend across the network; None for the in-process one, which
    never fails or times out (a breaker there would only be asked, never opened)."""
    if backend.name == MemoryBackend.name:
        return None
    return CircuitBreaker(
        failures=settings.breaker_failures, cooldown=settings.breaker_cooldown_seconds
    )


class Store:
    """Checkpoint semantics over a backend: what a load, a write, a lock or an admin change means
    for a conversation's record. The backend's failures, the sealing, the listing and the secret
    bootstrap are its parts' (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        *,
        settings: StoreSettings,
        tenancy: Tenancy,
        sealer: Sealer | None = None,
        fallback: MemoryBackend | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        # Public for the transition: callers should be handed the app's Tenancy instead.
        self.tenancy = tenancy
        self.counters = StoreCounters()
        sealer = sealer or Sealer()
        self._calls = ResilientBackend(
            backend,
            tenancy=tenancy,
            counters=self.counters,
            timeout=settings.operation_timeout_seconds,
            breaker=breaker or _breaker_for(backend, settings),
            fallback=fallback,
        )
        self._records = SealedRecords(
            sealer, max_record_bytes=settings.max_record_bytes, counters=self.counters
        )
        self._ttl_ms = settings.ttl_seconds * 1000
        self._listing = Listing(
            self._calls,
            self._records,
            tenancy,
            ttl_ms=self._ttl_ms,
            max_listed=settings.max_listed_conversations,
        )
        self._touched: OrderedDict[str, float] = OrderedDict()  # record key -> last index move
        self._opened: KeptDecoded[Record] = KeptDecoded(_OPENED_KEPT)
        self._secret = SharedSecret(self._calls, tenancy, sealer)
        # Each conversation's ledger, kept beside its record, sealed alike.
        self.ledgers = Ledgers(self._calls, tenancy=tenancy, sealer=sealer, ttl_ms=self._ttl_ms)
        # What compaction removed, for the model's recall tool, sealed alike.
        self.originals = Originals(self._calls, tenancy=tenancy, sealer=sealer, ttl_ms=self._ttl_ms)
        self._lock_ttl_ms = int(settings.lock_ttl_seconds * 1000)
        self._max_checkpoints = settings.max_checkpoints

    def _owned(
        self, tenant: str, conversation_id: str, key: str, raw: bytes | None
    ) -> Record | None:
        """The stored value as this conversation's record, named in the clear; None if absent
        or not its own."""
        record = (
            None
            if raw is None
            else self._records.open(key, raw, owner=self.tenancy.owner(tenant, conversation_id))
        )
        # The owner matched, so this is that conversation's record: name it in the clear.
        return None if record is None else replace(record, conversation_id=conversation_id)

    # --- the request path (never raises StoreError) ------------------------------------------------

    async def load(self, tenant: str, conversation_id: str) -> Record | None:
        """The conversation's record, refreshing its TTL; None on a miss or any failure."""
        self.counters.loads += 1
        key = self.tenancy.record_key(tenant, conversation_id)
        touch = self._listing.on_read(tenant, key) if self._touch_due(key) else None
        try:
            raw = await self._calls.get(key, ttl_ms=self._ttl_ms, touch=touch, or_fallback=True)
        except StoreError:
            raw = None
        record = None if raw is None else self._opened_record(tenant, conversation_id, key, raw)
        if record is None:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        return record

    def _opened_record(
        self, tenant: str, conversation_id: str, key: str, raw: bytes
    ) -> Record | None:
        """``_owned``, decoded once while the stored bytes stay the same: the same bytes under
        the same key open (the sealer's keys are fixed) and decode alike, and a Record is frozen."""
        owner = self.tenancy.owner(tenant, conversation_id)
        record = self._opened.get(key, owner, raw)
        if record is None:
            record = self._owned(tenant, conversation_id, key, raw)
            if record is not None:
                self._opened.put(key, owner, raw, record)
        return record

    def _touch_due(self, key: str) -> bool:
        """This process last moved ``key`` in the listing over TOUCH_SECONDS ago (or never); if
        so, it counts as moved now."""
        last = self._touched.get(key)
        if last is not None and time.monotonic() - last < TOUCH_SECONDS:
            return False
        self._touch(key)
        return True

    def _touch(self, key: str) -> None:
        self._touched[key] = time.monotonic()
        self._touched.move_to_end(key)
        if len(self._touched) > _TOUCHED_KEPT:
            self._touched.popitem(last=False)

    async def _listed(self, tenant: str, key: str) -> None:
        """After a write: listed newest first; a read in the next TOUCH_SECONDS need not move it."""
        self._touch(key)
        await self._listing.on_write(tenant, key)

    async def add_checkpoint(
        self, tenant: str, conversation_id: str, checkpoint: Checkpoint
    ) -> bool:
        """Store ``checkpoint`` if it extends the record; False if rejected or not written."""
        key = self.tenancy.record_key(tenant, conversation_id)
        owner = self.tenancy.owner(tenant, conversation_id)
        # The record names its conversation sealed: the stored value holds no raw id.
        stored_id = self.tenancy.seal_conversation_id(tenant, conversation_id, key=key)

        async def write(backend: Backend) -> bool:
            for attempt in range(_CAS_ATTEMPTS):
                raw = await backend.get(key)
                current = None if raw is None else self._records.open(key, raw, owner=owner)
                updated = extend(
                    current,
                    checkpoint,
                    owner=owner,
                    conversation_id=stored_id,
                    max_checkpoints=self._max_checkpoints,
                )
                if updated is None:
                    self.counters.write_rejected += 1
                    return False
                if updated is current:
                    return True  # already stored: a retry of a write that landed
                sealed = self._records.seal_within_limit(key, updated)
                if sealed is None:
                    self.counters.write_too_large += 1
                    log.warning(
                        "checkpoint not stored: alone it exceeds store.max_record_bytes (%d)",
                        self._records.max_record_bytes,
                    )
                    return False
                if await backend.compare_and_set(key, raw, sealed, ttl_ms=self._ttl_ms):
                    self.counters.writes += 1
                    return True
                self.counters.write_conflicts += 1
                # Jittered backoff so that a crowd of writers spreads out instead of colliding again.
                await asyncio.sleep(random.uniform(0, min(0.001 * 2**attempt, 0.02)))
            self.counters.write_gave_up += 1
            return False

        try:
            written = await self._calls.call_or_fallback(write, factor=_WRITE_TIMEOUT_FACTOR)
        except StoreError:
            return False
        if written:
            await self._listed(tenant, key)
        return written

    async def acquire_lock(self, tenant: str, conversation_id: str) -> str | None:
        """A token if this caller may summarize the conversation now, else None.

        While the backend is unavailable the lock is taken in-process, so one replica still never
        runs two summaries of one conversation.
        """
        key = self.tenancy.lock_key(tenant, conversation_id)
        secret = secrets.token_hex(16)
        fallback = self._calls.fallback
        try:
            if await self._calls.call(lambda b: b.acquire(key, secret, ttl_ms=self._lock_ttl_ms)):
                self.counters.locks_acquired += 1
                return _PRIMARY_LOCK + secret
        except StoreError:
            if fallback is not None and await fallback.acquire(
                key, secret, ttl_ms=self._lock_ttl_ms
            ):
                self.counters.locks_acquired += 1
                return _FALLBACK_LOCK + secret
        self.counters.locks_busy += 1
        return None

    async def release_lock(self, tenant: str, conversation_id: str, token: str) -> bool:
        """Release a lock taken with ``token``; never someone else's. False if it was not held."""
        key = self.tenancy.lock_key(tenant, conversation_id)
        kind, secret = token[:2], token[2:]
        if kind == _FALLBACK_LOCK:
            fallback = self._calls.fallback
            return fallback is not None and await fallback.release(key, secret)
        try:
            return await self._calls.call(lambda b: b.release(key, secret))
        except StoreError:
            return False  # the lock expires by its TTL

    # --- admin (raises StoreError) ------------------------------------------------------------

    async def inspect(self, tenant: str, conversation_id: str) -> Record | None:
        """The record without refreshing its TTL; StoreError when the store cannot answer."""
        key = self.tenancy.record_key(tenant, conversation_id)
        raw = await self._calls.get(key)
        return self._owned(tenant, conversation_id, key, raw)

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Forget the conversation; True if it was stored. StoreError when that cannot be done."""
        key = self.tenancy.record_key(tenant, conversation_id)
        index = self.tenancy.index_key(tenant)

        async def forget(backend: Backend) -> bool:
            deleted = await backend.delete(key)
            await self.ledgers.forget(backend, tenant, conversation_id)
            await self.originals.forget(backend, tenant, conversation_id)
            await backend.index_remove(index, [key])
            return deleted

        deleted = await self._calls.call(forget)
        if self._calls.fallback is not None:
            deleted = await forget(self._calls.fallback) or deleted
        return deleted

    async def change(
        self, tenant: str, conversation_id: str, edit: Callable[[Record], Record]
    ) -> Record | None:
        """Apply an operator's ``edit`` to the stored record (compare-and-set, so no concurrent
        summary is lost) and return the record as written; None when there is none. ``edit``
        may raise to refuse; StoreError when the store cannot answer or the write keeps losing,
        PayloadTooLarge when what it adds does not fit ``store.max_record_bytes`` alone."""
        key = self.tenancy.record_key(tenant, conversation_id)
        owner = self.tenancy.owner(tenant, conversation_id)

        async def write(backend: Backend) -> Record | None:
            for _ in range(_CAS_ATTEMPTS):
                raw = await backend.get(key)
                record = None if raw is None else self._records.open(key, raw, owner=owner)
                if record is None:
                    return None
                updated = edit(record)
                sealed = self._records.seal_within_limit(key, updated)
                if sealed is None:
                    raise PayloadTooLarge(
                        "the new checkpoint alone exceeds store.max_record_bytes "
                        f"({self._records.max_record_bytes})",
                        code="record_too_large",
                    )
                if await backend.compare_and_set(key, raw, sealed, ttl_ms=self._ttl_ms):
                    self.counters.writes += 1
                    return self._records.open(key, sealed, owner=owner)
                self.counters.write_conflicts += 1
                await asyncio.sleep(random.uniform(0, 0.01))
            raise StoreError("the record kept changing under the write; try again")

        record = await self._calls.call(write, factor=_WRITE_TIMEOUT_FACTOR)
        if record is None:
            return None
        await self._listed(tenant, key)
        return replace(record, conversation_id=conversation_id)

    async def list_conversations(
        self, tenant: str, *, limit: int = 100, before: float | None = None
    ) -> ConversationPage:
        """The tenant's conversations, most recently used first (``proxy.state.listing``);
        StoreError when the store cannot answer."""
        return await self._listing.page(tenant, limit=limit, before=before)

    # --- lifecycle: the app's calls, answered by the parts ---------------------------------------

    def state(self) -> StoreHealth:
        """The current health without any I/O (for metrics and logs)."""
        return self._calls.state()

    async def health(self) -> StoreHealth:
        """Ping the backend (unless the circuit is open), or read the shared tenant secret while
        it is missing, and report ok or degraded; never raises."""
        with contextlib.suppress(StoreError):
            if self.tenancy.provisional:
                await self._secret.load()
            else:
                await self._calls.ping()
        return self.state()

    async def start(self) -> None:
        """At start-up: read (or create) the shared tenant secret (``proxy.state.secret``)."""
        await self._secret.start()

    async def watch(self, interval: float) -> None:
        """Probe the backend every ``interval`` seconds while degraded, so health comes back
        (and the shared secret is read) without waiting for traffic. Runs until cancelled.

        While healthy, a shared secret is checked on each round too: a Redis that restarted
        empty (no persistence) lost it, and the replicas must put the same one back, not each
        create their own (the first one written wins; the others adopt it).
        """
        while True:
            await asyncio.sleep(interval)
            if self.state().state == "degraded":
                await self.health()
            elif self._secret.shared:
                with contextlib.suppress(StoreError):
                    await self._secret.load()

    async def aclose(self) -> None:
        await self._calls.aclose()
