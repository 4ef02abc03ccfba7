"""A conversation's ledger as the store keeps it: one small sealed value beside its checkpoints.

What the ledger holds is ``proxy.economics``' business; here it is an opaque JSON object, kept
the way a checkpoint record is kept: under a key derived from the tenant and the conversation
(``Tenancy.ledger_key``, its own purpose, so it is never listed as a conversation), sealed with
that key as associated data, bound to its owner (a value of another owner is a miss), with the
store's TTL, written by compare-and-set (one read and one write per answered request; a
concurrent writer's update is never lost).

The request path never sees a failure (``update`` answers None); the admin API's ``inspect``
raises ``StoreError`` so an operator knows the store did not answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from proxy import wirejson
from proxy.errors import StoreError
from proxy.state.resilient import ResilientBackend
from proxy.state.sealing import Sealer, SealError
from proxy.state.store.base import Backend
from proxy.state.tenancy import Tenancy

log = logging.getLogger("proxy.store.conversations")

_CAS_ATTEMPTS = 16
_WRITE_TIMEOUT_FACTOR = 4

Entry = dict[str, Any]  # the ledger as its owner wrote it (a JSON object)
Edit = Callable[[Entry | None], Entry]  # the stored entry (None: none yet) -> the new one


def _loads(plain: bytes) -> Any:
    """JSON by orjson; by the standard library what orjson refuses (a lone surrogate a client
    sent as its model's name, which ``wirejson.encode`` wrote escaped)."""
    try:
        return orjson.loads(plain)
    except orjson.JSONDecodeError:
        return json.loads(plain)


class Ledgers:
    """Per-conversation ledger entries: read, changed by compare-and-set, forgotten."""

    def __init__(
        self, calls: ResilientBackend, *, tenancy: Tenancy, sealer: Sealer, ttl_ms: int
    ) -> None:
        self._calls = calls
        self._tenancy = tenancy
        self._sealer = sealer
        self._ttl_ms = ttl_ms

    def _open(self, key: str, owner: str, raw: bytes | None) -> Entry | None:
        if raw is None:
            return None
        try:
            data = _loads(self._sealer.open(raw, context=key.encode()))
        except (SealError, ValueError) as exc:
            log.warning("ignoring an unreadable stored ledger: %s", exc)
            return None
        if not isinstance(data, Mapping) or data.get("owner") != owner:
            return None
        entry = data.get("ledger")
        return dict(entry) if isinstance(entry, Mapping) else None

    def _seal(self, key: str, owner: str, entry: Entry) -> bytes:
        # orjson through wirejson: the entry carries the console's timeline (a few KB, written
        # after every answer), where the standard library's json costs ten times more.
        plain = wirejson.encode({"owner": owner, "ledger": entry})
        return self._sealer.seal(plain, context=key.encode())

    async def update(self, tenant: str, conversation_id: str, edit: Edit) -> Entry | None:
        """Apply ``edit`` to the conversation's entry and store the result (compare-and-set);
        the entry as written, or None when it could not be written (never raises: the request
        path calls it, and a lost ledger entry costs an operator's view, never a request)."""
        key = self._tenancy.ledger_key(tenant, conversation_id)
        owner = self._tenancy.owner(tenant, conversation_id)

        async def write(backend: Backend) -> Entry | None:
            for attempt in range(_CAS_ATTEMPTS):
                raw = await backend.get(key)
                updated = edit(self._open(key, owner, raw))
                sealed = self._seal(key, owner, updated)
                if await backend.compare_and_set(key, raw, sealed, ttl_ms=self._ttl_ms):
                    return updated
                await asyncio.sleep(random.uniform(0, min(0.001 * 2**attempt, 0.02)))
            return None

        try:
            return await self._calls.call_or_fallback(write, factor=_WRITE_TIMEOUT_FACTOR)
        except StoreError:
            return None

    async def inspect(self, tenant: str, conversation_id: str) -> Entry | None:
        """The conversation's entry, or None; StoreError when the store cannot answer."""
        key = self._tenancy.ledger_key(tenant, conversation_id)
        raw = await self._calls.call(lambda b: b.get(key))
        return self._open(key, self._tenancy.owner(tenant, conversation_id), raw)

    async def inspect_many(self, tenant: str, conversation_ids: list[str]) -> list[Entry | None]:
        """Each conversation's entry, or None, in one store call (a listing page's ledgers);
        StoreError when the store cannot answer."""
        keys = [self._tenancy.ledger_key(tenant, cid) for cid in conversation_ids]
        if not keys:
            return []
        values = await self._calls.call(lambda b: b.get_many(keys))
        return [
            self._open(key, self._tenancy.owner(tenant, cid), raw)
            for key, cid, (raw, _ttl) in zip(keys, conversation_ids, values, strict=True)
        ]

    async def forget(self, backend: Backend, tenant: str, conversation_id: str) -> bool:
        """Delete the entry from ``backend`` (the store's delete, primary and fallback)."""
        return await backend.delete(self._tenancy.ledger_key(tenant, conversation_id))
