"""A conversation's timeline: its last answered requests, one small point each.

The operator console draws it: the prompt the client had (its full history) against the prompt
the provider got, where each summary started to apply, and what the provider read from its
prompt cache. Nothing else keeps per-request figures (the ledger holds totals), so the points
ride in the conversation's ledger entry (``proxy.state.ledgers``) under ``"turns"``: written by
the ledger's own compare-and-set after each answer whose usage the provider reported (off the
request path, no extra store call), sealed, under the store's TTL, forgotten with the
conversation. A request whose answer carries no usage (a stream without
``stream_options.include_usage``) leaves no point.

Bounded: the newest ``MAX_TURNS`` points, each a short JSON array, so the entry every request
rewrites stays a few KB.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from proxy.state.ledgers import Entry

__all__ = ["MAX_TURNS", "TURNS_KEY", "Turn", "turns_of", "with_turn"]

TURNS_KEY = "turns"
MAX_TURNS = 100


@dataclass(frozen=True, slots=True)
class Turn:
    """One answered request as the proxy planned it and the provider billed it."""

    at: float  # seconds since the epoch, when the answer ended
    messages: int  # the client's history, in messages (a checkpoint's ``covered`` counts these)
    full_tokens: int  # the proxy's count of that history: what sending it direct would cost
    sent_tokens: int  # the proxy's count of the prompt it sent
    billed_tokens: int  # the prompt tokens the provider billed
    cached_tokens: int  # of which read from the provider's prompt cache
    checkpoint: str | None  # the summary applied, None when sent as the client sent it

    def view(self) -> dict[str, Any]:
        """The point as the admin API shows it."""
        return {
            "at": self.at,
            "messages": self.messages,
            "full_tokens": self.full_tokens,
            "sent_tokens": self.sent_tokens,
            "billed_tokens": self.billed_tokens,
            "cached_tokens": self.cached_tokens,
            "checkpoint": self.checkpoint,
        }


_FIELDS = [field.name for field in fields(Turn)]  # a point's order: the record's


def _point(raw: object) -> Turn | None:
    if not isinstance(raw, list) or len(raw) != 7:
        return None
    at, messages, full, sent, billed, cached, checkpoint = raw
    counts = (messages, full, sent, billed, cached)
    if not isinstance(at, int | float) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in counts
    ):
        return None
    if checkpoint is not None and not isinstance(checkpoint, str):
        return None
    return Turn(float(at), messages, full, sent, billed, cached, checkpoint)


def turns_of(entry: Entry | None) -> list[Turn]:
    """The points an entry holds, oldest first; an unreadable one is left out."""
    raw = entry.get(TURNS_KEY) if entry else None
    if not isinstance(raw, list):
        return []
    return [turn for turn in map(_point, raw) if turn is not None]


def with_turn(entry: Entry, turn: Turn) -> Entry:
    """``entry`` with ``turn`` appended, the oldest dropped beyond ``MAX_TURNS``."""
    kept = entry.get(TURNS_KEY)
    points = list(kept) if isinstance(kept, list) else []
    points.append([getattr(turn, name) for name in _FIELDS])
    return {**entry, TURNS_KEY: points[-MAX_TURNS:]}
