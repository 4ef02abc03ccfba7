"""The conversation store the app uses: records of checkpoints, bound to their owner, fail-open.

One object over one backend (memory or Redis) that speaks in tenants, conversation ids and
checkpoints, and hides every backend failure from the request path:

- ``load`` is the fast path: one backend read that also refreshes the TTL.
- ``add_checkpoint`` is a compare-and-set loop: a checkpoint is written only if it extends what is
  stored (``proxy.core.checkpoints.extend``), and a concurrent writer's checkpoint is never lost.
- ``acquire_lock``/``release_lock`` make summarization single-flight; correctness never rests on
  them, only duplicate summarizer cost does.
- Failures (timeouts, a dead Redis, an open circuit) turn into misses, or into calls served by an
  in-process fallback while Redis is away; they are counted, logged once per outage, and the store
  reports itself ``degraded`` until a call succeeds again. Admin calls raise ``StoreError`` instead:
  an operator must know that a delete did not happen.
- Values that do not open (tampered, moved, wrong key), do not parse, or belong to another owner
  are misses; an owner mismatch is also a security log event.
- Without ``store.tenant_secret`` a Redis store shares one secret between replicas and restarts:
  created once in Redis (SET NX, no TTL, ``proxy.state.tenancy.SECRET_KEY``, sealed when encryption
  keys are set) and read at start-up. While it cannot be read the tenancy is provisional: every
  call is served in-process (its keys would mean nothing to other replicas), the store reports
  ``degraded``, and ``watch`` keeps trying; once read, the in-process state is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from proxy.config.settings import StoreSettings
from proxy.core.checkpoints import (
    Checkpoint,
    Record,
    RecordError,
    decode_record,
    encode_record,
    extend,
)
from proxy.errors import PayloadTooLarge, StoreError
from proxy.state.sealing import Sealer, SealError
from proxy.state.store.base import Backend, IndexEntry
from proxy.state.store.breaker import CircuitBreaker
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import SECRET_KEY, Tenancy

log = logging.getLogger("proxy.store.conversations")
security_log = logging.getLogger("proxy.security")

T = TypeVar("T")

_CAS_ATTEMPTS = 64
# A compare-and-set loop is a few round trips; under contention it may take more than one call.
_WRITE_TIMEOUT_FACTOR = 8
_PRIMARY_LOCK = "r."
_FALLBACK_LOCK = "l."
# A request's read moves its conversation in the listing index at most this often per process:
# last use is listed to about a minute, and a busy agent run does not pay for the index on every
# request (the pipeline costs ~60 us more than a lone GETEX: tests/bench/bench_store.py).
TOUCH_SECONDS = 60.0
_TOUCHED_KEPT = 65_536
# Start-up: a few quick tries to read the shared tenant secret, then the background probe goes on.
_SECRET_ATTEMPTS = 3
_SECRET_BACKOFF_SECONDS = 0.2


@dataclass
class StoreCounters:
    """Plain counters for the metrics layer to read (monotonic, never reset)."""

    loads: int = 0
    hits: int = 0
    misses: int = 0
    writes: int = 0
    write_rejected: int = 0
    write_conflicts: int = 0
    write_gave_up: int = 0
    write_too_large: int = 0
    errors: int = 0
    skipped: int = 0
    fallbacks: int = 0
    invalid_values: int = 0
    owner_mismatches: int = 0
    locks_acquired: int = 0
    locks_busy: int = 0
    backend_calls: int = 0


@dataclass(frozen=True)
class StoreHealth:
    state: Literal["ok", "degraded"]
    backend: str
    reason: str | None = None


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


class Store:
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
        self.tenancy = tenancy
        self.counters = StoreCounters()
        self._backend = backend
        self._fallback = fallback
        self._sealer = sealer or Sealer()
        self._breaker = breaker or CircuitBreaker(
            failures=settings.breaker_failures, cooldown=settings.breaker_cooldown_seconds
        )
        self._timeout = settings.operation_timeout_seconds
        self._ttl_ms = settings.ttl_seconds * 1000
        self._lock_ttl_ms = int(settings.lock_ttl_seconds * 1000)
        self._max_checkpoints = settings.max_checkpoints
        self._max_record_bytes = settings.max_record_bytes
        self._max_listed = settings.max_listed_conversations
        self._touched: OrderedDict[str, float] = OrderedDict()  # record key -> last index update
        self._outage_since: float | None = None
        self._last_error: str | None = None
        # No configured secret: the tenancy's secret lives in Redis, shared by every replica.
        self._shares_secret = tenancy.provisional
        if tenancy.provisional:
            self._outage_since = time.monotonic()  # reported degraded until the secret is read

    # --- failure handling ------------------------------------------------------------------------

    async def _primary(
        self, call: Callable[[Backend], Awaitable[T]], *, factor: int = 1, keyed: bool = True
    ) -> T:
        """Run ``call`` on the backend, bounded in time; every failure is a StoreError.

        ``keyed`` calls use keys derived from the tenant secret: refused while it is provisional.
        """
        if keyed and self.tenancy.provisional:
            self.counters.skipped += 1
            raise StoreError("store unavailable: the shared tenant secret is not loaded yet")
        if not self._breaker.allow():
            self.counters.skipped += 1
            raise StoreError(f"store unavailable: {self._last_error or 'circuit open'}")
        self.counters.backend_calls += 1
        try:
            async with asyncio.timeout(self._timeout * factor):
                result = await call(self._backend)
        except (StoreError, TimeoutError) as exc:
            # A caller's cancellation (client gone) is neither: it propagates and counts nothing.
            self._failed(exc)
            raise StoreError(f"store call failed: {self._last_error}") from exc
        self._succeeded()
        return result

    async def _resilient(self, call: Callable[[Backend], Awaitable[T]], *, factor: int = 1) -> T:
        """``_primary``, or the in-process fallback when the backend cannot answer."""
        try:
            return await self._primary(call, factor=factor)
        except StoreError:
            if self._fallback is None:
                raise
            self.counters.fallbacks += 1
            return await call(self._fallback)

    def _failed(self, exc: BaseException) -> None:
        self.counters.errors += 1
        self._breaker.record_failure()
        self._last_error = str(exc) or type(exc).__name__
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            log.warning(
                "state store %s failing (%s); serving without it until it answers again",
                self._backend.name,
                self._last_error,
            )

    def _succeeded(self) -> None:
        self._breaker.record_success()
        if self._outage_since is not None and not self.tenancy.provisional:
            log.warning(
                "state store %s recovered after %.1fs",
                self._backend.name,
                time.monotonic() - self._outage_since,
            )
            self._outage_since = None
            self._last_error = None
            if self._fallback is not None:
                self._fallback.clear()  # stale the moment the shared store is back

    # --- values ------------------------------------------------------------------------------

    def _open(self, key: str, raw: bytes, *, owner: str | None) -> Record | None:
        try:
            record = decode_record(self._sealer.open(raw, context=key.encode()))
        except (SealError, RecordError) as exc:
            self.counters.invalid_values += 1
            log.warning("ignoring an unreadable stored record: %s", exc)
            return None
        if owner is not None and record.owner != owner:
            self.counters.owner_mismatches += 1
            security_log.warning("stored record under %s carries another owner; ignored", key)
            return None
        return record

    def _seal(self, key: str, record: Record) -> bytes:
        return self._sealer.seal(encode_record(record), context=key.encode())

    def _seal_within_limit(self, key: str, record: Record) -> bytes | None:
        """The sealed record, its oldest checkpoints dropped until it fits max_record_bytes;
        None when the newest checkpoint alone does not fit (issue 9: a 10 MB summary made an
        84 MB Redis value)."""
        while True:
            raw = self._seal(key, record)
            if len(raw) <= self._max_record_bytes:
                return raw
            if len(record.checkpoints) <= 1:
                return None
            record = dataclasses.replace(record, checkpoints=record.checkpoints[:-1])

    # --- the request path (never raises StoreError) ------------------------------------------------

    async def load(self, tenant: str, conversation_id: str) -> Record | None:
        """The conversation's record, refreshing its TTL; None on a miss or any failure."""
        self.counters.loads += 1
        key = self.tenancy.record_key(tenant, conversation_id)
        touch = self._index_entry(tenant, key) if self._touch_due(key) else None
        try:
            raw = await self._resilient(lambda b: b.get(key, ttl_ms=self._ttl_ms, touch=touch))
        except StoreError:
            raw = None
        record = (
            None
            if raw is None
            else self._open(key, raw, owner=self._owner(tenant, conversation_id))
        )
        if record is None:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        # The owner matched, so this is that conversation's record: name it in the clear.
        return replace(record, conversation_id=conversation_id)

    def _owner(self, tenant: str, conversation_id: str) -> str:
        return self.tenancy.owner(tenant, conversation_id)

    def _index_entry(self, tenant: str, key: str, *, limit: int = 0) -> IndexEntry:
        """``key``'s place in the tenant's listing, as of now."""
        index = self.tenancy.index_key(tenant)
        return IndexEntry(index, key, time.time(), self._ttl_ms, limit)

    def _touch_due(self, key: str) -> bool:
        """This process last moved ``key`` in the index over TOUCH_SECONDS ago (or never); if so,
        it counts as moved now."""
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

    async def _indexed(self, tenant: str, key: str) -> None:
        """After a write: the record is listed, newest first. Its own call, after the write's:
        the index only serves the admin listing, so it never spends the write's time budget,
        and a failure here never undoes or fails the write."""
        self._touch(key)  # a read in the next TOUCH_SECONDS need not move it again
        entry = self._index_entry(tenant, key, limit=self._max_listed)
        with contextlib.suppress(StoreError):
            await self._primary(lambda b: b.index_add(entry))

    async def add_checkpoint(
        self, tenant: str, conversation_id: str, checkpoint: Checkpoint
    ) -> bool:
        """Store ``checkpoint`` if it extends the record; False if rejected or not written."""
        key = self.tenancy.record_key(tenant, conversation_id)
        owner = self._owner(tenant, conversation_id)
        # The record names its conversation sealed: the stored value holds no raw id (issue 9).
        stored_id = self.tenancy.seal_conversation_id(tenant, conversation_id, key=key)

        async def write(backend: Backend) -> bool:
            for attempt in range(_CAS_ATTEMPTS):
                raw = await backend.get(key)
                current = None if raw is None else self._open(key, raw, owner=owner)
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
                sealed = self._seal_within_limit(key, updated)
                if sealed is None:
                    self.counters.write_too_large += 1
                    log.warning(
                        "checkpoint not stored: alone it exceeds store.max_record_bytes (%d)",
                        self._max_record_bytes,
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
            written = await self._resilient(write, factor=_WRITE_TIMEOUT_FACTOR)
        except StoreError:
            return False
        if written:
            await self._indexed(tenant, key)
        return written

    async def acquire_lock(self, tenant: str, conversation_id: str) -> str | None:
        """A token if this caller may summarize the conversation now, else None.

        While the backend is unavailable the lock is taken in-process, so one replica still never
        runs two summaries of one conversation.
        """
        key = self.tenancy.lock_key(tenant, conversation_id)
        secret = secrets.token_hex(16)
        try:
            if await self._primary(lambda b: b.acquire(key, secret, ttl_ms=self._lock_ttl_ms)):
                self.counters.locks_acquired += 1
                return _PRIMARY_LOCK + secret
        except StoreError:
            if self._fallback is not None and await self._fallback.acquire(
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
            return self._fallback is not None and await self._fallback.release(key, secret)
        try:
            return await self._primary(lambda b: b.release(key, secret))
        except StoreError:
            return False  # the lock expires by its TTL

    # --- admin (raises StoreError) ------------------------------------------------------------

    async def inspect(self, tenant: str, conversation_id: str) -> Record | None:
        """The record without refreshing its TTL; StoreError when the store cannot answer."""
        key = self.tenancy.record_key(tenant, conversation_id)
        raw = await self._primary(lambda b: b.get(key))
        record = (
            None
            if raw is None
            else self._open(key, raw, owner=self._owner(tenant, conversation_id))
        )
        # The owner matched, so this is that conversation's record: name it in the clear.
        return None if record is None else replace(record, conversation_id=conversation_id)

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Forget the conversation; True if it was stored. StoreError when that cannot be done."""
        key = self.tenancy.record_key(tenant, conversation_id)
        index = self.tenancy.index_key(tenant)

        async def forget(backend: Backend) -> bool:
            deleted = await backend.delete(key)
            await backend.index_remove(index, [key])
            return deleted

        deleted = await self._primary(forget)
        if self._fallback is not None:
            deleted = await forget(self._fallback) or deleted
        return deleted

    async def change(
        self, tenant: str, conversation_id: str, edit: Callable[[Record], Record]
    ) -> Record | None:
        """Apply an operator's ``edit`` to the stored record (compare-and-set, so no concurrent
        summary is lost) and return the record as written; None when there is none. ``edit``
        may raise to refuse; StoreError when the store cannot answer or the write keeps losing,
        PayloadTooLarge when what it adds does not fit ``store.max_record_bytes`` alone."""
        key = self.tenancy.record_key(tenant, conversation_id)
        owner = self._owner(tenant, conversation_id)

        async def write(backend: Backend) -> Record | None:
            for _ in range(_CAS_ATTEMPTS):
                raw = await backend.get(key)
                record = None if raw is None else self._open(key, raw, owner=owner)
                if record is None:
                    return None
                updated = edit(record)
                sealed = self._seal_within_limit(key, updated)
                if sealed is None:
                    raise PayloadTooLarge(
                        "the new checkpoint alone exceeds store.max_record_bytes "
                        f"({self._max_record_bytes})",
                        code="record_too_large",
                    )
                if await backend.compare_and_set(key, raw, sealed, ttl_ms=self._ttl_ms):
                    self.counters.writes += 1
                    return self._open(key, sealed, owner=owner)
                self.counters.write_conflicts += 1
                await asyncio.sleep(random.uniform(0, 0.01))
            raise StoreError("the record kept changing under the write; try again")

        record = await self._primary(write, factor=_WRITE_TIMEOUT_FACTOR)
        if record is None:
            return None
        await self._indexed(tenant, key)
        return replace(record, conversation_id=conversation_id)

    async def list_conversations(
        self, tenant: str, *, limit: int = 100, before: float | None = None
    ) -> ConversationPage:
        """The tenant's conversations, most recently used first, ``limit`` at a time from
        ``before`` (a page's ``next_before``); StoreError when the store cannot answer.

        Read from the tenant's index (no scan of the keyspace); members whose record expired or
        does not open as this tenant's are dropped from it on the way.
        """
        index = self.tenancy.index_key(tenant)

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

        return await self._primary(collect, factor=_WRITE_TIMEOUT_FACTOR)

    def _listed(
        self, tenant: str, key: str, raw: bytes, ttl: int | None, last_used: float
    ) -> ConversationInfo | None:
        record = self._open(key, raw, owner=None)
        if record is None:
            return None
        named = self.tenancy.open_conversation_id(tenant, record.conversation_id, key=key)
        # The record names its conversation; it must be the one this key belongs to.
        if named is None or key != self.tenancy.record_key(tenant, named):
            return None
        if record.owner != self._owner(tenant, named):
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

    # --- lifecycle --------------------------------------------------------------------------

    def state(self) -> StoreHealth:
        """The current health without any I/O (for metrics and logs)."""
        if self.tenancy.provisional:
            reason = "the shared tenant secret is not loaded yet"
            if self._last_error:
                reason += f": {self._last_error}"
            return StoreHealth("degraded", self._backend.name, reason)
        if self._outage_since is None:
            return StoreHealth("ok", self._backend.name)
        return StoreHealth("degraded", self._backend.name, self._last_error)

    async def health(self) -> StoreHealth:
        """Ping the backend (unless the circuit is open), or read the shared tenant secret while
        it is missing, and report ok or degraded; never raises."""
        with contextlib.suppress(StoreError):
            if self.tenancy.provisional:
                await self._load_shared_secret()
            else:
                await self._primary(lambda b: b.ping())
        return self.state()

    async def start(self) -> None:
        """At start-up: read (or create) the shared tenant secret, with a few bounded tries.

        If Redis cannot answer the proxy still starts and serves in-process; ``watch`` goes on.
        """
        if not self.tenancy.provisional:
            return
        for attempt in range(_SECRET_ATTEMPTS):
            if attempt:
                await asyncio.sleep(_SECRET_BACKOFF_SECONDS * attempt)
            with contextlib.suppress(StoreError):
                await self._load_shared_secret()
                return
        log.warning(
            "state store %s unreachable at start-up (%s): serving with in-process state until it "
            "answers, then using the tenant secret shared in %s",
            self._backend.name,
            self._last_error,
            SECRET_KEY,
        )

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
            elif self._shares_secret:
                with contextlib.suppress(StoreError):
                    await self._load_shared_secret()

    async def _load_shared_secret(self) -> None:
        """Offer this process's secret as the shared one unless a replica did first, then use
        whichever Redis holds; StoreError when that cannot be done."""
        context = SECRET_KEY.encode()
        mine = self._sealer.seal(self.tenancy.secret, context=context)
        raw = await self._primary(
            lambda b: b.set_forever(SECRET_KEY, mine, only_if_absent=True), keyed=False
        )
        provisional = self.tenancy.provisional
        try:
            secret = self._sealer.open(raw, context=context)
            changed = secret != self.tenancy.secret
            self.tenancy.adopt(secret)
        except (SealError, ValueError) as exc:
            # Not a Redis outage but a configuration problem: say what to do (once), keep serving.
            error = f"{SECRET_KEY} cannot be used ({exc})"
            if error != self._last_error:
                log.error(
                    "the shared tenant secret in Redis key %s cannot be used (%s): restore the "
                    "encryption key that sealed it or set store.tenant_secret (deleting the key "
                    "forgets every conversation); serving with in-process state meanwhile",
                    SECRET_KEY,
                    exc,
                )
            self._last_error = error
            raise StoreError(error) from exc
        if self._sealer.enabled and not self._sealer.is_current(raw):
            # Sealed with an older key: seal it with the current one, so that the old key can
            # leave encryption_keys after a rotation. Every replica writes the same secret.
            resealed = self._sealer.seal(secret, context=context)
            with contextlib.suppress(StoreError):
                await self._primary(
                    lambda b: b.set_forever(SECRET_KEY, resealed, only_if_absent=False),
                    keyed=False,
                )
        if not provisional:
            if changed:  # Redis lost ours and another replica's came first: converge on it
                log.warning("the shared tenant secret in Redis changed; using the new one")
            return
        if self._last_error is not None:
            log.warning("state store reachable again: using the shared tenant secret")
        self._outage_since = None
        self._last_error = None
        if self._fallback is not None:
            self._fallback.clear()  # keyed by the provisional secret: meaningless from now on

    async def aclose(self) -> None:
        try:
            await self._backend.aclose()
        except StoreError as exc:
            log.warning("closing the state store failed: %s", exc)
        if self._fallback is not None:
            await self._fallback.aclose()
