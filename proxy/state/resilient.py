"""Calls to the store backend made safe for the request path: bounded, skipped, or served in-process.

Every call is bounded by ``store.operation_timeout_seconds``; after repeated failures the circuit
breaker skips the backend for a while instead of waiting on it; a caller that may be served
in-process (a Redis store's fallback) is, while the backend is away. Failures are counted, logged
once per outage, and the store reports itself ``degraded`` until a call succeeds again.

Keys derived from a provisional tenant secret (``proxy.state.secret``) mean nothing to other
replicas: calls with such keys are refused and served in-process, and the store stays degraded
until the shared secret is read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, TypeVar

from proxy import tracing
from proxy.errors import StoreError
from proxy.state.counters import StoreCounters
from proxy.state.store.base import Backend, IndexEntry
from proxy.state.store.breaker import CircuitBreaker
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy

# The store's log lines keep the name they are documented under.
log = logging.getLogger("proxy.store.conversations")

T = TypeVar("T")


@dataclass(frozen=True)
class StoreHealth:
    state: Literal["ok", "degraded"]
    backend: str
    reason: str | None = None


class ResilientBackend:
    """One backend's calls with their failure handling (timeout, breaker, in-process fallback)
    and the health that follows from them; knows nothing of records."""

    def __init__(
        self,
        backend: Backend,
        *,
        tenancy: Tenancy,
        counters: StoreCounters,
        timeout: float,
        breaker: CircuitBreaker | None,
        fallback: MemoryBackend | None = None,
    ) -> None:
        self.fallback = fallback
        self._backend = backend
        self._tenancy = tenancy
        self._counters = counters
        self._timeout = timeout
        # None for an in-process backend: it never fails or times out, so there is nothing to
        # skip (set by the store, once).
        self._breaker = breaker
        self._outage_since: float | None = None
        self._last_error: str | None = None
        # A span per call of a backend across the network; an in-process call takes less time
        # than its span would (docs/operations.md, "Traces").
        self._traced = backend.name != MemoryBackend.name
        # The in-process store (that very class) is never waited on: none of its methods
        # suspends, and what a caller hands ``call`` awaits only them (the backoff after a lost
        # compare-and-set never runs: nothing can run between its read and its write). Its
        # calls skip the deadline, a timer set and cancelled per call.
        self._bounded = type(backend) is not MemoryBackend
        if tenancy.provisional:
            self._outage_since = time.monotonic()  # reported degraded until the secret is read

    @property
    def name(self) -> str:
        return self._backend.name

    @property
    def last_error(self) -> str | None:
        return self._last_error

    async def call(
        self, call: Callable[[Backend], Awaitable[T]], *, factor: int = 1, keyed: bool = True
    ) -> T:
        """Run ``call`` on the backend, bounded in time; every failure is a StoreError.

        ``keyed`` calls use keys derived from the tenant secret: refused while it is provisional.
        """
        if keyed and self._tenancy.provisional:
            self._counters.skipped += 1
            raise StoreError("store unavailable: the shared tenant secret is not loaded yet")
        if self._breaker is not None and not self._breaker.allow():
            self._counters.skipped += 1
            raise StoreError(f"store unavailable: {self._last_error or 'circuit open'}")
        self._counters.backend_calls += 1
        try:
            if not self._bounded:
                result = await call(self._backend)
            else:
                async with asyncio.timeout(self._timeout * factor):
                    if self._traced and tracing.on:
                        with tracing.span("store", {"compaction.store": self._backend.name}):
                            result = await call(self._backend)
                    else:
                        result = await call(self._backend)
        except (StoreError, TimeoutError) as exc:
            # A caller's cancellation (client gone) is neither: it propagates and counts nothing.
            self._failed(exc)
            raise StoreError(f"store call failed: {self._last_error}") from exc
        self._succeeded()
        return result

    async def call_or_fallback(
        self, call: Callable[[Backend], Awaitable[T]], *, factor: int = 1
    ) -> T:
        """``call``, or the in-process fallback when the backend cannot answer."""
        try:
            return await self.call(call, factor=factor)
        except StoreError:
            if self.fallback is None:
                raise
            self._counters.fallbacks += 1
            return await call(self.fallback)

    async def get(
        self,
        key: str,
        *,
        ttl_ms: int | None = None,
        touch: IndexEntry | None = None,
        or_fallback: bool = False,
    ) -> bytes | None:
        """The backend's ``get`` as ``call`` runs it (``or_fallback``: as ``call_or_fallback``
        does): the one read most callers make, so that they hand this layer no function."""
        read = partial(_get, key=key, ttl_ms=ttl_ms, touch=touch)
        return await (self.call_or_fallback(read) if or_fallback else self.call(read))

    def _failed(self, exc: BaseException) -> None:
        self._counters.errors += 1
        if self._breaker is not None:
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
        if self._breaker is not None:
            self._breaker.record_success()
        if self._outage_since is not None and not self._tenancy.provisional:
            log.warning(
                "state store %s recovered after %.1fs",
                self._backend.name,
                time.monotonic() - self._outage_since,
            )
            self._outage_since = None
            self._last_error = None
            if self.fallback is not None:
                self.fallback.clear()  # stale the moment the shared store is back

    def refused(self, error: str) -> None:
        """Remember why the store cannot be used though the backend answers (a configuration
        problem, reported by health until it is solved)."""
        self._last_error = error

    def recovered(self) -> None:
        """The store is usable again (the shared secret was read): no outage, and the
        in-process state, keyed by the provisional secret, is meaningless from now on."""
        self._outage_since = None
        self._last_error = None
        if self.fallback is not None:
            self.fallback.clear()

    def state(self) -> StoreHealth:
        """The current health without any I/O (for metrics and logs)."""
        if self._tenancy.provisional:
            reason = "the shared tenant secret is not loaded yet"
            if self._last_error:
                reason += f": {self._last_error}"
            return StoreHealth("degraded", self._backend.name, reason)
        if self._outage_since is None:
            return StoreHealth("ok", self._backend.name)
        return StoreHealth("degraded", self._backend.name, self._last_error)

    async def ping(self) -> None:
        """Ping the backend (unless the circuit is open); StoreError when it cannot answer."""
        await self.call(lambda b: b.ping())

    async def aclose(self) -> None:
        try:
            await self._backend.aclose()
        except StoreError as exc:
            log.warning("closing the state store failed: %s", exc)
        if self.fallback is not None:
            await self.fallback.aclose()


async def _get(
    backend: Backend, *, key: str, ttl_ms: int | None, touch: IndexEntry | None
) -> bytes | None:
    return await backend.get(key, ttl_ms=ttl_ms, touch=touch)
