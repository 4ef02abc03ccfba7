"""The tenant secret replicas share through Redis when ``store.tenant_secret`` is not set.

Created once in Redis (SET NX, no TTL, ``proxy.state.tenancy.SECRET_KEY``, sealed when encryption
keys are set) and read at start-up. While it cannot be read the tenancy is provisional: every call
is served in-process (its keys would mean nothing to other replicas) and the store reports
``degraded`` (``proxy.state.resilient``); once read, the in-process state is dropped. A Redis that
restarted empty lost it: the replicas then put the same one back rather than each creating its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from proxy.errors import StoreError
from proxy.state.resilient import ResilientBackend
from proxy.state.sealing import Sealer, SealError
from proxy.state.tenancy import SECRET_KEY, Tenancy

# The store's log lines keep the name they are documented under.
log = logging.getLogger("proxy.store.conversations")

# Start-up: a few quick tries to read the shared tenant secret, then the background probe goes on.
_SECRET_ATTEMPTS = 3
_SECRET_BACKOFF_SECONDS = 0.2


class SharedSecret:
    """Reads (or first offers) the shared tenant secret and keeps the tenancy on it."""

    def __init__(self, calls: ResilientBackend, tenancy: Tenancy, sealer: Sealer) -> None:
        self._calls = calls
        self._tenancy = tenancy
        self._sealer = sealer
        # No configured secret: the tenancy's secret lives in Redis, shared by every replica.
        self.shared = tenancy.provisional

    async def start(self) -> None:
        """At start-up: read (or create) the shared tenant secret, with a few bounded tries.

        If Redis cannot answer the proxy still starts and serves in-process; the store's watch
        goes on trying.
        """
        if not self._tenancy.provisional:
            return
        for attempt in range(_SECRET_ATTEMPTS):
            if attempt:
                await asyncio.sleep(_SECRET_BACKOFF_SECONDS * attempt)
            with contextlib.suppress(StoreError):
                await self.load()
                return
        log.warning(
            "state store %s unreachable at start-up (%s): serving with in-process state until it "
            "answers, then using the tenant secret shared in %s",
            self._calls.name,
            self._calls.last_error,
            SECRET_KEY,
        )

    async def load(self) -> None:
        """Offer this process's secret as the shared one unless a replica did first, then use
        whichever Redis holds; StoreError when that cannot be done."""
        context = SECRET_KEY.encode()
        mine = self._sealer.seal(self._tenancy.secret, context=context)
        raw = await self._calls.call(
            lambda b: b.set_forever(SECRET_KEY, mine, only_if_absent=True), keyed=False
        )
        provisional = self._tenancy.provisional
        try:
            secret = self._sealer.open(raw, context=context)
            changed = secret != self._tenancy.secret
            self._tenancy.adopt(secret)
        except (SealError, ValueError) as exc:
            # Not a Redis outage but a configuration problem: say what to do (once), keep serving.
            error = f"{SECRET_KEY} cannot be used ({exc})"
            if error != self._calls.last_error:
                log.error(
                    "the shared tenant secret in Redis key %s cannot be used (%s): restore the "
                    "encryption key that sealed it or set store.tenant_secret (deleting the key "
                    "forgets every conversation); serving with in-process state meanwhile",
                    SECRET_KEY,
                    exc,
                )
            self._calls.refused(error)
            raise StoreError(error) from exc
        if self._sealer.enabled and not self._sealer.is_current(raw):
            # Sealed with an older key: seal it with the current one, so that the old key can
            # leave encryption_keys after a rotation. Every replica writes the same secret.
            resealed = self._sealer.seal(secret, context=context)
            with contextlib.suppress(StoreError):
                await self._calls.call(
                    lambda b: b.set_forever(SECRET_KEY, resealed, only_if_absent=False),
                    keyed=False,
                )
        if not provisional:
            if changed:  # Redis lost ours and another replica's came first: converge on it
                log.warning("the shared tenant secret in Redis changed; using the new one")
            return
        if self._calls.last_error is not None:
            log.warning("state store reachable again: using the shared tenant secret")
        self._calls.recovered()
