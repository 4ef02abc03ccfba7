"""The one writer of a conversation's books after each answer and each summary: priced, added
to its ledger entry, told as events (docs/cost.md).

After an answer the follow-up hands over the usage the provider reported (``BilledUsage``,
cached tokens included) and, for a planned request, its pace sample; this prices the usage at
the conversation's model (``PriceTable``), weighs it against the counterfactual of sending the
client's full history direct, and changes the conversation's entry in the store once
(``proxy.state.ledgers``: one compare-and-set per answer; what the change does to the ledger,
the timeline and the pace is ``proxy.compaction.money.books``'). The write runs as a task after
the answer has been relayed: the client never waits for it, and a store failure loses an entry,
never a request. ``RequestPriced`` and ``SummaryPriced`` tell the metrics.

The counterfactual's full history is the plan's ``tokens_before`` in the provider's tokens: the
proxy counted what it sent (``tokens_after``) and the provider billed ``usage.prompt`` for it,
so this request's own ratio converts the count (a calibration sample of exactly this prompt).
Whether the cache was warm is read from the ledger: its previous request less than
``CACHE_TTL_SECONDS`` ago.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, get_args

from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation
from proxy.compaction.events import RequestPriced, SummaryPriced
from proxy.compaction.money.books import (
    Answered,
    KnownEntries,
    PaceSample,
    Priced,
    Turn,
    ledger_of,
    summary_added,
)
from proxy.compaction.money.pending import PendingWrites
from proxy.core.plan import Plan
from proxy.economics.prices import Price, PriceTable
from proxy.economics.usage import BilledUsage, Wire, billed_usage
from proxy.errors import StoreError
from proxy.events import Listeners
from proxy.state.ledgers import Entry, Ledgers

logger = logging.getLogger("proxy.compaction")

_WIRES = frozenset(get_args(Wire))


def read_usage(route: str, body: bytes) -> BilledUsage | None:
    """The usage a response's decoded end (and head) holds for ``route``'s dialect."""
    return billed_usage(body, route) if route in _WIRES else None  # type: ignore[arg-type]


def full_history_tokens(sent: Plan, usage: BilledUsage) -> int:
    """The client's full history in the provider's tokens (see the module docstring)."""
    if sent.tokens_after <= 0 or sent.tokens_before <= sent.tokens_after:
        return usage.prompt  # nothing removed: the direct run sent the same prompt
    return round(usage.prompt * sent.tokens_before / sent.tokens_after)


def ledger_view(entry: Entry | None) -> dict[str, Any] | None:
    """The ledger as the admin API shows it: its totals, net saving and last use (None: no
    request or summary priced yet, only other keys such as the pace)."""
    if entry is None or "v" not in entry:
        return None
    ledger, at = ledger_of(entry)
    return {
        **ledger.to_dict(),
        "total_spent": ledger.total_spent,
        "saved": ledger.saved,
        "last_request_at": at,
        "model": entry.get("model"),
    }


class Spending:
    """Prices answers and summaries into each conversation's ledger."""

    def __init__(
        self,
        *,
        prices: PriceTable,
        ledgers: Ledgers,
        listeners: Listeners,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._prices = prices
        self._ledgers = ledgers
        self._listeners = listeners
        self._clock = clock
        self._writes = PendingWrites("ledger write")
        self._known = KnownEntries()  # the books of the entries written last, read once

    async def header(self, conv: Conversation) -> tuple[bytes, bytes] | None:
        """``X-Compaction-Ledger`` for the conversation's ledger as stored (one store read);
        None when the store does not answer."""
        try:
            entry = await self._ledgers.inspect(conv.tenant, conv.conversation_id)
        except StoreError:
            return None
        ledger, _ = ledger_of(entry)
        return protocol.ledger_header(
            ledger.requests, ledger.spent, ledger.summarizer_spent, ledger.saved
        )

    def price(self, model: str) -> Price:
        """``model``'s prices (the ``pricing:`` entries, then the built-in table)."""
        return self._prices.price(model)

    def answered(
        self,
        conv: Conversation,
        sent: Plan,
        usage: BilledUsage | None,
        *,
        pace: PaceSample | None = None,
    ) -> None:
        """Record one answered request (``sent``: the plan its body was rendered from): its
        price and timeline point when the provider reported ``usage``, its ``pace`` sample when
        it was planned; one write of the entry, never waited (called as the answer ends)."""
        now = self._clock()
        priced = None
        if usage is not None:
            priced = Priced(
                usage,
                self._prices.price(conv.model),
                full_history_tokens(sent, usage),
                conv.model,
                Turn(
                    at=now,
                    messages=len(sent.source),
                    full_tokens=sent.tokens_before,
                    sent_tokens=sent.tokens_after,
                    billed_tokens=usage.prompt,
                    cached_tokens=usage.cached_read,
                    checkpoint=sent.applied_checkpoint if sent.changed else None,
                ),
            )
        elif pace is None:
            return
        self._writes.start(
            partial(self._write, conv, Answered(now, priced, pace, known=self._known))
        )

    async def _write(self, conv: Conversation, edit: Answered) -> None:
        if await self._ledgers.update(conv.tenant, conv.conversation_id, edit) is None:
            edit(None)  # not stored: still counted, as a first request (cold cache)
        priced = edit.priced
        if priced is None:
            return
        usage, before, after = priced.usage, edit.before, edit.after
        self._listeners.emit(
            RequestPriced(
                policy=conv.policy_name,
                priced=priced.price.priced,
                spent=after.spent - before.spent,
                direct=after.counterfactual - before.counterfactual,
                prompt_tokens=usage.prompt,
                cached_tokens=usage.cached_read,
                cache_write_tokens=usage.cache_write,
                output_tokens=usage.output,
            )
        )

    def summary_made(self, conv: Conversation, model: str, usage: BilledUsage) -> None:
        """Price one summary (``usage``: all its calls) at ``model``'s price and add it to the
        conversation's ledger."""
        price = self._prices.price(model)
        self._listeners.emit(SummaryPriced(conv.policy_name, price.cost(usage)))
        edit = partial(summary_added, usage=usage, price=price)
        self._writes.start(partial(self._ledgers.update, conv.tenant, conv.conversation_id, edit))

    async def join(self) -> None:
        """Wait for the ledger writes under way (tests and shutdown)."""
        await self._writes.join()
