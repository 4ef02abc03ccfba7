"""Making a summary: one per conversation at a time, extending what is stored, stored, told.

A summary is made under the conversation's store lock (single-flight across replicas). Inside
it, the deepest stored checkpoint is read again: a summary finished meanwhile (a background job,
another replica) is extended, never re-read. The new checkpoint is stored and a
``SummaryStored`` event tells hooks and the export.

Four callers, one way: ``summarize_now`` for a summary the request waits for (mode ``inline``,
the overflow ``rescue``, the ``admin`` API's forced compaction; it waits for whoever holds the
lock), ``summarize_unless_busy`` for the one made ahead of time (mode ``ahead``; it gives up
when someone holds the lock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import SummaryFailed, SummaryMade, SummaryStored
from proxy.compaction.money.pace import Paces
from proxy.compaction.money.spending import Spending
from proxy.compaction.offload import work
from proxy.compaction.planning import AHEAD
from proxy.compaction.summaries.prefix_summary import (
    PrefixSource,
    prefix_is_cheaper,
    summarize_on_prefix,
)
from proxy.compaction.summaries.stored import StoredCheckpoints
from proxy.compaction.summaries.summarizer import SummarizerFactory
from proxy.config.settings import SummarizerSettings
from proxy.core.checkpoints import Checkpoint
from proxy.core.pins import to_summarize
from proxy.core.plan import SummaryRequest
from proxy.core.text import well_formed
from proxy.core.tokens import TokenCounter
from proxy.economics.usage import BilledUsage
from proxy.errors import SummarizerError
from proxy.events import Listeners
from proxy.state.conversations import Store

_POLL_SECONDS = 0.1
logger = logging.getLogger("proxy.compaction")
# A summary's text, the model that wrote it and what its calls were billed (None: not told).
Written = tuple[str, str, BilledUsage | None]


class Summaries:
    """Makes, stores and announces the summaries a conversation needs."""

    def __init__(
        self,
        *,
        store: Store,
        stored: StoredCheckpoints,
        counter: TokenCounter,
        summarizer_for: SummarizerFactory,
        settings: SummarizerSettings,
        listeners: Listeners,
        spending: Spending | None = None,
        paces: Paces | None = None,
    ) -> None:
        self._store = store
        self._stored = stored
        self._counter = counter
        self._summarizer_for = summarizer_for
        self._settings = settings
        self._listeners = listeners
        self._spending = spending
        self._paces = paces

    async def summarize_now(
        self, conv: Conversation, wanted: SummaryRequest, parent_id: str | None, *, mode: str
    ) -> Checkpoint:
        """The checkpoint covering ``wanted``, made now or by whoever holds the lock; the caller
        plans again with it (the planner decides how it applies). Raises SummarizerError."""
        deadline = time.monotonic() + self._settings.timeout_seconds
        while True:
            checkpoint = await self.summarize_unless_busy(conv, wanted, parent_id, mode=mode)
            if checkpoint is not None:
                return checkpoint
            # Another caller (a background job here, or another replica) holds the lock. Its
            # summary may cover less than this request needs (an agent run grew meanwhile): once
            # it is stored and the lock is free, the next try extends it.
            if time.monotonic() >= deadline:
                raise SummarizerError("another summary of this conversation did not finish in time")
            await asyncio.sleep(_POLL_SECONDS)
            found = await self._stored.deepest(conv)
            if found is not None and found.covered >= wanted.covered:
                return found

    async def summarize_unless_busy(
        self,
        conv: Conversation,
        wanted: SummaryRequest,
        parent_id: str | None,
        *,
        mode: str,
        triggered: bool = True,
        prefix: PrefixSource | None = None,
    ) -> Checkpoint | None:
        """Make, store and return the checkpoint for ``wanted``; None if another caller (here or
        on another replica) holds the conversation's lock. Raises SummarizerError.

        ``triggered``: a trigger fired (rather than only being near), so the summary applies
        from the next request on; a summary made only because a trigger was near waits for it.
        ``prefix``: the request this summary follows, to ask it on the cached prompt
        (``proxy.compaction.summaries.prefix_summary``).
        """
        token = await self._store.acquire_lock(conv.tenant, conv.conversation_id)
        if token is None:
            return None
        try:
            # The plan may be stale (a background job, or a summary finished by someone else
            # meanwhile): extend the deepest stored checkpoint, never re-read what it covers.
            existing = await self._stored.deepest(conv)
            if existing is not None and existing.covered >= wanted.covered:
                return existing
            if existing is not None and existing.covered > wanted.start:
                wanted = SummaryRequest(
                    to_summarize(conv.messages, conv.policy.pin, existing.covered, wanted.covered),
                    existing.summary,
                    existing.covered,
                    wanted.covered,
                )
                parent_id = existing.id
            checkpoint = await self._make(
                conv, wanted, parent_id, mode=mode, triggered=triggered, prefix=prefix
            )
            await self._store.add_checkpoint(conv.tenant, conv.conversation_id, checkpoint)
            self._listeners.emit(
                SummaryStored(conv.tenant, conv.conversation_id, conv.policy_name, checkpoint)
            )
            if self._paces is not None:
                await self._paces.stored(conv, checkpoint)
            return checkpoint
        finally:
            await self._store.release_lock(conv.tenant, conv.conversation_id, token)

    async def _make(
        self,
        conv: Conversation,
        wanted: SummaryRequest,
        parent_id: str | None,
        *,
        mode: str,
        triggered: bool,
        prefix: PrefixSource | None = None,
    ) -> Checkpoint:
        """The summarizer's text for ``wanted``, as a new checkpoint (not stored yet)."""
        own = self._settings.for_policy(conv.policy, request_model=conv.model)
        started = time.perf_counter()
        # Counting and hashing a huge history is CPU work: off the event loop.
        counter = self._counter.with_facts(conv.facts)
        input_tokens = await work(
            conv.heavy, counter.count_messages, list(wanted.messages), conv.model
        )
        written = None
        if prefix is not None and self._on_prefix(conv, own, input_tokens):
            written = await self._write_on_prefix(conv, wanted, own, prefix)
        if written is None:
            written = await self._write_quoted(conv, wanted, own, mode)
        text, model, billed = written
        seconds = time.perf_counter() - started
        summary_tokens = self._counter.count_text(text, model)
        self._listeners.emit(SummaryMade(mode, seconds, input_tokens, summary_tokens))
        if self._spending is not None:
            # What its calls' answers said they cost; a summarizer that does not tell (a test's
            # fake): the proxy's counts, billed uncached.
            if billed is None:
                billed = BilledUsage(input_tokens, 0, 0, summary_tokens)
            self._spending.summary_made(conv, model, billed)
        return await work(
            conv.heavy,
            partial(
                Checkpoint.create,
                conv.messages,
                covered=wanted.covered,
                summary=text,
                parent_id=parent_id,
                summary_tokens=summary_tokens,
                # With $request the label is the client's model name: encodable text
                # for the store, the admin API and the export sinks.
                model=well_formed(model),
                strategy="summarize" if triggered else AHEAD,
                dropped_messages=len(wanted.messages),  # pinned ones are sent, not dropped
                dropped_tokens=input_tokens,
                focus=conv.focus,
            ),
        )

    def _on_prefix(self, conv: Conversation, own: SummarizerSettings, tokens: int) -> bool:
        """Whether the summary is asked on the cached prefix (``summarizer.cached_prefix``)."""
        if own.cached_prefix != "auto" or self._spending is None:
            return own.cached_prefix == "on"
        price = self._spending.price(conv.model)
        return price.priced and prefix_is_cheaper(
            tokens,
            price,
            self._spending.price(own.model),
            summary_tokens=own.max_summary_tokens,
        )

    async def _write_on_prefix(
        self,
        conv: Conversation,
        wanted: SummaryRequest,
        own: SummarizerSettings,
        prefix: PrefixSource,
    ) -> Written | None:
        """The summary asked of the conversation's model on its cached prompt; None when that
        failed (the quoted summarizer is asked instead)."""
        try:
            made = await asyncio.wait_for(
                summarize_on_prefix(
                    prefix,
                    conv.messages,
                    wanted.messages,
                    wanted.covered,
                    model=conv.model,
                    max_tokens=own.max_summary_tokens,
                    counter=self._counter,
                    focus=conv.focus,
                ),
                timeout=own.timeout_seconds,
            )
        except (SummarizerError, TimeoutError) as exc:
            reason = exc.message if isinstance(exc, SummarizerError) else "timeout"
            logger.warning("a summary on the cached prefix failed, quoting instead: %s", reason)
            return None
        if made is None:  # the dialect makes no such call (Responses): quoted, as documented
            return None
        text, billed = made
        return text, conv.model, billed

    async def _write_quoted(
        self, conv: Conversation, wanted: SummaryRequest, own: SummarizerSettings, mode: str
    ) -> Written:
        """The summary of the quoted transcript, by the summarizer's model."""
        summarizer = self._summarizer_for(conv.credentials, own)
        # X-Compaction-Focus, for this summary only (a summarizer of old has no such keyword).
        steer = {"focus": conv.focus} if conv.focus else {}
        try:
            text = await asyncio.wait_for(
                summarizer.summarize(
                    wanted.messages,
                    previous=wanted.previous,
                    model=own.model,
                    max_tokens=own.max_summary_tokens,
                    **steer,
                ),
                timeout=own.timeout_seconds,
            )
        except TimeoutError as exc:
            self._listeners.emit(SummaryFailed(mode, "timeout"))
            raise SummarizerError("the summarizer timed out") from exc
        except SummarizerError:
            self._listeners.emit(SummaryFailed(mode, "error"))
            raise
        billed = getattr(summarizer, "billed", None)
        return text, own.model, billed if isinstance(billed, BilledUsage) else None
