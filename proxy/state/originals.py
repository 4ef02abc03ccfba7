"""What compaction removed from a conversation, kept so the model can fetch it back.

One sealed value per conversation, beside its checkpoints and its ledger and kept the same way:
under a key derived from the tenant and the conversation (``Tenancy.originals_key``), sealed with
that key as associated data, bound to its owner (another owner's value reads as empty), with the
store's TTL, written by compare-and-set. It holds handle -> text, oldest first, within a byte
budget (``recall.budget_bytes``, counted as the value holds them: JSON): adding past it evicts
the oldest, and a piece larger than half the budget is kept cut to that, saying so. A handle is
looked up only in its own conversation's value, so a handle of another conversation or tenant
is simply not there.

The request path never sees a failure: ``keep`` answers None, ``find`` answers ``UNAVAILABLE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy import wirejson
from proxy.errors import StoreError
from proxy.state.owned import OwnedValues
from proxy.state.store.base import Backend

_WRITE_TIMEOUT_FACTOR = 4
# One original takes at most this share of the budget (a larger one is kept cut): one filling
# it all would evict every other and be evicted by the next.
_SHARES = 2
UNAVAILABLE = object()  # the store could not answer: not the same as "not kept"
# Ends an original kept cut to fit the budget (sizes in characters).
KEPT_CUT = "\n[recall: kept cut, the first {kept:,} of {total:,} characters; the rest is not kept]"


@dataclass(frozen=True)
class Kept:
    """What one ``keep`` did: pieces added, and pieces evicted to stay within the budget."""

    added: int
    evicted: int


class Originals(OwnedValues):
    """Per-conversation originals: kept by compare-and-set within a budget, found by handle."""

    field = "items"  # [[handle, text], ...], oldest first

    def _items(self, key: str, owner: str, raw: bytes | None) -> dict[str, str]:
        stored = self._open(key, owner, raw)
        items: dict[str, str] = {}
        for pair in stored if isinstance(stored, list) else ():
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair):
                items[pair[0]] = pair[1]
        return items

    async def keep(
        self,
        tenant: str,
        conversation_id: str,
        pieces: Sequence[tuple[str, str]],
        *,
        budget_bytes: int,
    ) -> Kept | None:
        """Add the ``pieces`` (handle, text) not kept yet, oldest first, evicting the oldest kept
        past ``budget_bytes`` (a piece larger than half of it is kept cut, and says so); None
        when the store could not be written (never raises)."""
        key = self._tenancy.originals_key(tenant, conversation_id)
        owner = self._tenancy.owner(tenant, conversation_id)

        def step(raw: bytes | None) -> tuple[bytes | None, Kept | None]:
            items = self._items(key, owner, raw)
            added = 0
            for handle, text in pieces:
                if handle not in items:
                    items[handle] = _fitted(handle, text, budget_bytes // _SHARES)
                    added += 1
            if not added:
                return None, Kept(0, 0)
            evicted = _evict(items, budget_bytes)
            return self._seal(key, owner, list(items.items())), Kept(added, evicted)

        write = self._changing(key, step, otherwise=None)
        try:
            return await self._calls.call_or_fallback(write, factor=_WRITE_TIMEOUT_FACTOR)
        except StoreError:
            return None

    async def find(self, tenant: str, conversation_id: str, handle: str) -> str | object | None:
        """The text kept under ``handle`` in this conversation, None when it is not kept (never
        was, evicted, expired, another conversation's), ``UNAVAILABLE`` when the store failed."""
        key = self._tenancy.originals_key(tenant, conversation_id)
        try:
            raw = await self._calls.get(key)
        except StoreError:
            return UNAVAILABLE
        return self._items(key, self._tenancy.owner(tenant, conversation_id), raw).get(handle)

    async def inspect(self, tenant: str, conversation_id: str) -> list[tuple[str, str]]:
        """Every (handle, text) kept for the conversation, oldest first (the admin API's and the
        console's view); StoreError when the store cannot answer."""
        key = self._tenancy.originals_key(tenant, conversation_id)
        raw = await self._calls.get(key)
        items = self._items(key, self._tenancy.owner(tenant, conversation_id), raw)
        return list(items.items())

    async def forget(self, backend: Backend, tenant: str, conversation_id: str) -> bool:
        """Delete the conversation's originals from ``backend`` (the store's delete)."""
        return await backend.delete(self._tenancy.originals_key(tenant, conversation_id))


def _evict(items: dict[str, str], budget_bytes: int) -> int:
    """Drop the oldest items until the rest fit ``budget_bytes`` (a new one fits: ``_fitted``;
    one kept before that bound, larger than the budget, goes too)."""
    sizes = {h: _size(h, t) for h, t in items.items()}
    total = sum(sizes.values())
    evicted = 0
    for handle in list(items):
        if total <= budget_bytes:
            break
        total -= sizes[handle]
        del items[handle]
        evicted += 1
    return evicted


def _size(handle: str, text: str) -> int:
    """What one item costs in the stored value: its JSON, as written."""
    return len(wirejson.encode([handle, text])) + 1  # and the comma after it


def _fitted(handle: str, text: str, budget_bytes: int) -> str:
    """``text`` when its item fits the budget; else its start, cut to fit with a note saying so
    (what a recall of it returns)."""
    if len(text) <= budget_bytes and _size(handle, text) <= budget_bytes:
        return text
    kept = text[:budget_bytes]  # characters: never fewer bytes than the budget allows
    for _ in range(8):  # each pass cuts in proportion to the excess (escapes, multi-byte)
        cut = kept + KEPT_CUT.format(kept=len(kept), total=len(text))
        size = _size(handle, cut)
        if size <= budget_bytes:
            return cut
        kept = kept[: max(0, len(kept) * budget_bytes // size - 64)]
    return KEPT_CUT.format(kept=0, total=len(text))
