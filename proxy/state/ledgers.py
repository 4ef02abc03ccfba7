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

from proxy.errors import StoreError
from proxy.state.owned import JsonObject, ObjectEdit, OwnedValues
from proxy.state.store.base import Backend

_WRITE_TIMEOUT_FACTOR = 4

Entry = JsonObject  # the ledger as its owner wrote it (a JSON object)
Edit = ObjectEdit  # the stored entry (None: none yet) -> the new one


class Ledgers(OwnedValues):
    """Per-conversation ledger entries: read, changed by compare-and-set, forgotten."""

    field = "ledger"

    async def update(self, tenant: str, conversation_id: str, edit: Edit) -> Entry | None:
        """Apply ``edit`` to the conversation's entry and store the result (compare-and-set);
        the entry as written, or None when it could not be written (never raises: the request
        path calls it, and a lost ledger entry costs an operator's view, never a request)."""
        key = self._tenancy.ledger_key(tenant, conversation_id)
        owner = self._tenancy.owner(tenant, conversation_id)
        step = self._object_step(key, owner, edit)
        write = self._changing(key, step, otherwise=None)
        try:
            return await self._calls.call_or_fallback(write, factor=_WRITE_TIMEOUT_FACTOR)
        except StoreError:
            return None

    async def inspect(self, tenant: str, conversation_id: str) -> Entry | None:
        """The conversation's entry, or None; StoreError when the store cannot answer."""
        key = self._tenancy.ledger_key(tenant, conversation_id)
        raw = await self._calls.get(key)
        return self._open_object(key, self._tenancy.owner(tenant, conversation_id), raw)

    async def forget(self, backend: Backend, tenant: str, conversation_id: str) -> bool:
        """Delete the entry from ``backend`` (the store's delete, primary and fallback)."""
        return await backend.delete(self._tenancy.ledger_key(tenant, conversation_id))

    async def inspect_many(self, tenant: str, conversation_ids: list[str]) -> list[Entry | None]:
        """Each conversation's entry, or None, in one store call (a listing page's ledgers);
        StoreError when the store cannot answer."""
        keys = [self._tenancy.ledger_key(tenant, cid) for cid in conversation_ids]
        if not keys:
            return []
        values = await self._calls.call(lambda b: b.get_many(keys))
        return [
            self._open_object(key, self._tenancy.owner(tenant, cid), raw)
            for key, cid, (raw, _ttl) in zip(keys, conversation_ids, values, strict=True)
        ]
