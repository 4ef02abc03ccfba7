"""A conversation's checkpoints as the store holds them: the one place that finds which applies.

Every "which checkpoint applies" of the request path, the summaries and the admin API goes
through ``StoredCheckpoints``, so the deepest matching checkpoint is found one way everywhere
(``proxy.core.checkpoints.find_deepest``, its digests looked up through the conversation's
facts, off the event loop for a heavy request). The request path reads the record itself (one
``Store.load``) and asks here only when there is something to find: a record, or a pin.
"""

from __future__ import annotations

from functools import partial

from proxy.compaction.conversation import Conversation
from proxy.compaction.offload import work
from proxy.compaction.summaries.pinning import choose_checkpoint
from proxy.core.carried import Carried
from proxy.core.checkpoints import Checkpoint, Record, find_deepest
from proxy.state.conversations import Store


class StoredCheckpoints:
    """Reads a conversation's record (one store read each) and finds checkpoints in it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # The digests of the last histories matched, so that one sent again is not looked up
        # message by message (``proxy.core.carried``).
        self._digests: Carried[bytes] = Carried()

    async def record(self, conv: Conversation) -> Record | None:
        return await self._store.load(conv.tenant, conv.conversation_id)

    async def deepest(self, conv: Conversation) -> Checkpoint | None:
        """The stored checkpoint deepest in this conversation's history."""
        record = await self.record(conv)
        deepest = partial(
            find_deepest, record, conv.messages, facts=conv.facts, carried=self._digests
        )
        return await work(conv.heavy, deepest)

    async def by_id(self, conv: Conversation, checkpoint_id: str | None) -> Checkpoint | None:
        """The stored checkpoint ``checkpoint_id``, if the conversation still holds it."""
        if checkpoint_id is None:
            return None
        record = await self.record(conv)
        return record.get(checkpoint_id) if record is not None else None

    def to_apply(
        self, conv: Conversation, record: Record | None, pinned: str | None
    ) -> Checkpoint | None:
        """The checkpoint a request applies: the one it pins (``proxy.compaction.summaries.pinning``;
        not enforced while the store cannot answer), else the deepest. Blocking: hashes."""
        if pinned is None:
            if record is None:
                return None
            return find_deepest(record, conv.messages, facts=conv.facts, carried=self._digests)
        ok = self._store.state().state == "ok"
        return choose_checkpoint(record, conv.messages, pinned, store_ok=ok, facts=conv.facts)
