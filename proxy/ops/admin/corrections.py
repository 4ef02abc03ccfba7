"""An operator's changes to a conversation's stored state: correct a summary, restore an older one.

A correction writes a new checkpoint over the same messages as the one corrected (its child),
which becomes current; the old one stays in the history. Restoring makes an older checkpoint
current again. ``proxy.core.history`` holds the rules; ``Store.change`` runs them in its
compare-and-set loop, so no summary written meanwhile is lost.
"""

from __future__ import annotations

import time

from proxy.config.sections import SummarizerSettings
from proxy.core import history
from proxy.core.checkpoints import Checkpoint, Record
from proxy.core.summary_message import BYTES_PER_TOKEN, escape_tags, summary_token_cap
from proxy.core.tokens import TokenCounter
from proxy.errors import NotFound, PayloadTooLarge
from proxy.state.conversations import Store


class Corrections:
    """Applies an operator's correction or restore to one conversation's record."""

    def __init__(
        self,
        store: Store,
        counter: TokenCounter,
        *,
        summarizer: SummarizerSettings,
        max_checkpoints: int,
    ) -> None:
        self._store = store
        self._counter = counter
        self._model = summarizer.model
        self._cap_tokens = summary_token_cap(summarizer.max_summary_tokens)  # as a summarizer's
        self._max_checkpoints = max_checkpoints

    def _checked(self, text: str) -> tuple[str, int]:
        """The text as stored (tags escaped, as a summarizer's) and its tokens; 413 over the cap
        a summarizer's text is cut to."""
        text = escape_tags(text)
        if len(text.encode()) > self._cap_tokens * BYTES_PER_TOKEN:
            tokens = self._cap_tokens + 1  # not worth counting
        else:
            tokens = self._counter.count_text(text, self._model)
        if tokens > self._cap_tokens:
            raise PayloadTooLarge(
                f"the summary is over {self._cap_tokens} tokens (2 x summarizer.max_summary_tokens "
                "+ 1024), the most a summary may hold",
                param="summary",
                code="summary_too_large",
            )
        return text, tokens

    async def correct(
        self, tenant: str, conversation_id: str, text: str, target_id: str | None
    ) -> Checkpoint:
        """Store ``text`` as the corrected summary of checkpoint ``target_id`` (None: the
        current one) and return the correction; NotFound without that conversation or checkpoint."""
        text, tokens = self._checked(text)
        made: list[Checkpoint] = []

        def correct(record: Record) -> Record:
            target = record.get(target_id) if target_id else history.current(record)
            if target is None:
                raise NotFound("no such checkpoint", param="checkpoint", code="not_found")
            now = time.time()
            fixed = history.corrected(target, text, summary_tokens=tokens, created_at=now)
            made[:] = [fixed]
            return history.correct(
                record, target.id, fixed, now=now, max_checkpoints=self._max_checkpoints
            )

        if await self._store.change(tenant, conversation_id, correct) is None:
            raise NotFound("no such conversation", code="not_found")
        return made[0]

    async def restore(self, tenant: str, conversation_id: str, checkpoint_id: str) -> Record:
        """Make checkpoint ``checkpoint_id`` current again; the record as written."""

        def restored(record: Record) -> Record:
            try:
                return history.restore(record, checkpoint_id)
            except history.UnknownCheckpoint:
                raise NotFound("no such checkpoint", code="not_found") from None

        record = await self._store.change(tenant, conversation_id, restored)
        if record is None:
            raise NotFound("no such conversation", code="not_found")
        return record
