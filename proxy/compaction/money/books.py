"""A conversation's books as its ledger entry holds them, and what each event does to them: pure
functions of the stored entry, which the entry's writer (``proxy.compaction.money.spending``)
hands to the store's compare-and-set (``proxy.state.ledgers``). No I/O here.

One entry per conversation (a JSON object, sealed beside its checkpoints) holds three things:

- the ledger (``proxy.economics.ledger``: what the answers and the summaries cost, against sending
  the full history direct), with ``at`` (when the last answer ended: the cache's warmth) and
  ``model``;
- the timeline: one point (``Turn``) per answer whose usage was reported, under ``"turns"``,
  the newest ``MAX_TURNS``. The operator console draws it: the prompt the client had (its full
  history) against the prompt the provider got, where each summary started to apply, and what
  the provider read from its prompt cache (the ledger holds only totals). A request whose answer
  carries no usage (a stream without ``stream_options.include_usage``) leaves no point;
- the pace (``Pace``, under ``"pace"``: how fast the history grows a turn, and the summaries made
  for it that no request has applied yet; ``proxy.compaction.money.pace`` reads it).

After an answer, ``Answered`` writes all three in one change of the entry; a summary adds its
cost (``summary_added``); a summary stored moves the pace's unapplied summary (``Stored``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.economics.ledger import Ledger, add_request, add_summary
from proxy.economics.prices import Price
from proxy.economics.usage import BilledUsage
from proxy.state.ledgers import Entry

PACE_KEY = "pace"  # the pace record's key inside the ledger entry
MIN_SAMPLES = 2  # growing requests seen before the growth is trusted
CACHE_TTL_SECONDS = 300.0  # Anthropic's default cache life; OpenAI's lasts 5-10 minutes idle
TURNS_KEY = "turns"  # the timeline's key inside the ledger entry
MAX_TURNS = 100  # points kept: each a short JSON array, so the entry stays a few KB


@dataclass(frozen=True, slots=True)
class Pace:
    """The record: the history's size at the last request, its mean growth, the newest summary
    not applied yet and how many summaries its chain holds."""

    tokens: int = 0
    samples: int = 0
    growth: float = 0.0
    unapplied: str | None = None
    unapplied_count: int = 0
    policy: str = ""  # the policy of the last request seen: what the metrics label
    at: float | None = None  # when the last request was seen (the clock's seconds)

    @classmethod
    def from_entry(cls, entry: Entry | None) -> Pace:
        raw = entry.get(PACE_KEY) if entry else None
        if not isinstance(raw, dict):
            return cls()
        try:
            unapplied = raw.get("unapplied")
            policy = raw.get("policy")
            at = raw.get("at")
            return cls(
                tokens=int(raw.get("tokens", 0)),
                samples=int(raw.get("samples", 0)),
                growth=float(raw.get("growth", 0.0)),
                unapplied=unapplied if isinstance(unapplied, str) else None,
                unapplied_count=int(raw.get("unapplied_count", 0)),
                policy=policy if isinstance(policy, str) else "",
                at=float(at) if isinstance(at, int | float) else None,
            )
        except (TypeError, ValueError):
            return cls()

    def to_dict(self) -> dict[str, Any]:
        """The record as the entry holds it, every field in its order (named one by one: built
        after every answer, where ``asdict`` deep-copies each)."""
        return {
            "tokens": self.tokens,
            "samples": self.samples,
            "growth": self.growth,
            "unapplied": self.unapplied,
            "unapplied_count": self.unapplied_count,
            "policy": self.policy,
            "at": self.at,
        }

    def grown_to(self, tokens: int) -> Pace:
        """The record once a request with a history of ``tokens`` is seen."""
        return self.seen(tokens, self.unapplied, self.unapplied_count, self.policy, self.at)

    def seen(
        self,
        tokens: int,
        unapplied: str | None,
        unapplied_count: int,
        policy: str,
        at: float | None,
    ) -> Pace:
        """``grown_to(tokens)`` with the other fields given: one record built, not one a field
        changed (``dataclasses.replace`` costs as much as the rest of an answer's books)."""
        samples, growth = self.samples, self.growth
        if self.tokens > 0 and tokens > self.tokens:  # not first seen, nor a retry, edit, fork
            samples += 1
            growth += (tokens - self.tokens - growth) / samples
        return Pace(tokens, samples, growth, unapplied, unapplied_count, policy, at)

    @property
    def growth_per_turn(self) -> float | None:
        """Mean tokens a turn adds; None while too few turns were seen."""
        return self.growth if self.samples >= MIN_SAMPLES else None


@dataclass(frozen=True, slots=True)
class PaceSample:
    """One planned request as the pace records it: its full history's tokens, the summary it
    applied (None: none), its policy."""

    tokens: int
    applied: str | None
    policy: str

    def into(self, pace: Pace, at: float) -> Pace:
        if self.applied is not None and self.applied == pace.unapplied:
            return pace.seen(self.tokens, None, 0, self.policy, at)
        return pace.seen(self.tokens, pace.unapplied, pace.unapplied_count, self.policy, at)


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

    def point(self) -> list[Any]:
        """The point as the entry holds it: its fields in their order."""
        return [
            self.at,
            self.messages,
            self.full_tokens,
            self.sent_tokens,
            self.billed_tokens,
            self.cached_tokens,
            self.checkpoint,
        ]

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
    points = kept[1 - MAX_TURNS :] if isinstance(kept, list) else []  # a copy, room for one
    points.append(turn.point())
    return {**entry, TURNS_KEY: points}


def ledger_of(entry: Entry | None) -> tuple[Ledger, float | None]:
    """The stored ledger and when it last saw a request (None: never, or unreadable)."""
    if entry is None:
        return Ledger(), None
    try:
        ledger = Ledger.from_dict(entry)
    except ValueError:
        return Ledger(), None
    at = entry.get("at")
    return ledger, float(at) if isinstance(at, int | float) else None


@dataclass(frozen=True, slots=True)
class Priced:
    """What one answer was billed, to be added to the ledger."""

    usage: BilledUsage
    price: Price
    full_tokens: int  # the client's full history in the provider's tokens
    model: str
    turn: Turn  # its point on the timeline


@dataclass(frozen=True, slots=True)
class Known:
    """What an entry holds as ``ledger_of`` and ``Pace.from_entry`` read it (None: not known)."""

    ledger: tuple[Ledger, float | None] | None
    pace: Pace | None


_UNKNOWN = Known(None, None)


class KnownEntries:
    """The books of the entries ``Answered`` built lately, by the entry object's identity: the
    store hands an edit the very object this process wrote while no other writer changed it
    (``proxy.state.owned``), so the next answer reads its ledger and pace without reading them
    out of the entry again. An entry is held (so its identity is never another's) until
    ``max_entries`` newer ones push it out. Used on the event loop only (no lock)."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._kept: OrderedDict[int, tuple[Entry, Known]] = OrderedDict()

    def of(self, entry: Entry | None) -> Known:
        kept = None if entry is None else self._kept.get(id(entry))
        if kept is None or kept[0] is not entry:
            return _UNKNOWN
        return kept[1]

    def remember(self, entry: Entry, known: Known) -> None:
        self._kept[id(entry)] = (entry, known)
        if len(self._kept) > self.max_entries:
            self._kept.popitem(last=False)


@dataclass(slots=True)
class Answered:
    """What one answer does to the entry: its price on the ledger and its point on the timeline
    (``priced``, when the provider reported usage), and its request on the pace (``pace``).
    Applied by the store's compare-and-set, perhaps more than once (a concurrent writer won):
    ``before`` and ``after`` are the ledger of the application that was written. ``known``: the
    books of the entries built before (read again only for an entry it does not know)."""

    at: float
    priced: Priced | None
    pace: PaceSample | None
    before: Ledger = field(default_factory=Ledger)
    after: Ledger = field(default_factory=Ledger)
    known: KnownEntries | None = None

    def __call__(self, entry: Entry | None) -> Entry:
        known = _UNKNOWN if self.known is None else self.known.of(entry)
        changed = dict(entry or {})
        pace = known.pace
        if self.pace is not None:
            pace = self.pace.into(pace or Pace.from_entry(entry), self.at)
            changed[PACE_KEY] = pace.to_dict()
            if not isinstance(self.at, float):
                pace = None  # read back, its ``at`` is a float: not known as it was built
        priced = self.priced
        if priced is None:
            return self._known(changed, Known(known.ledger, pace))
        ledger, at = known.ledger or ledger_of(entry)
        warm = at is not None and 0 <= self.at - at < CACHE_TTL_SECONDS
        self.before = ledger
        self.after = add_request(
            ledger, priced.usage, priced.price, full_prompt_tokens=priced.full_tokens, warm=warm
        )
        changed.update(self.after.to_dict(), at=self.at, model=priced.model)
        return self._known(
            with_turn(changed, priced.turn), Known((self.after, float(self.at)), pace)
        )

    def _known(self, entry: Entry, known: Known) -> Entry:
        if self.known is not None:
            self.known.remember(entry, known)
        return entry


def summary_added(entry: Entry | None, *, usage: BilledUsage, price: Price) -> Entry:
    """The entry with one more summary on its ledger (``usage``: all its calls, at ``price``)."""
    ledger, _ = ledger_of(entry)
    return {**(entry or {}), **add_summary(ledger, usage, price).to_dict()}


@dataclass(slots=True)
class Stored:
    """What a new summary (``checkpoint``, extending ``parent``) does to the pace: it becomes the
    summary not applied yet; the one it does not extend is superseded, never to be applied
    (``superseded``: how many summaries that chain held, of the application that was written)."""

    checkpoint: str
    parent: str | None
    policy: str
    superseded: int = 0

    def __call__(self, entry: Entry | None) -> Entry:
        pace = Pace.from_entry(entry)
        extends = pace.unapplied is not None and self.parent == pace.unapplied
        self.superseded = pace.unapplied_count if pace.unapplied and not extends else 0
        count = pace.unapplied_count + 1 if extends else 1
        pace = replace(pace, unapplied=self.checkpoint, unapplied_count=count, policy=self.policy)
        return {**(entry or {}), PACE_KEY: pace.to_dict()}
