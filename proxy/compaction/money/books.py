"""A conversation's books as its ledger entry holds them, and what each event does to them: pure
functions of the stored entry, which the entry's writer (``proxy.compaction.money.spending``)
hands to the store's compare-and-set (``proxy.state.ledgers``). No I/O here.

One entry per conversation (a JSON object, sealed beside its checkpoints) holds three things:

- the ledger (``proxy.economics.ledger``: what the answers and the summaries cost, against sending
  the full history direct), with ``at`` (when the last answer ended: the cache's warmth) and
  ``model``;
- the timeline (``proxy.state.timeline``: one point per answer whose usage was reported);
- the pace (``Pace``, under ``"pace"``: how fast the history grows a turn, and the summaries made
  for it that no request has applied yet; ``proxy.compaction.money.pace`` reads it).

After an answer, ``Answered`` writes all three in one change of the entry; a summary adds its
cost (``summary_added``); a summary stored moves the pace's unapplied summary (``Stored``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from proxy.economics.ledger import Ledger, add_request, add_summary
from proxy.economics.prices import Price
from proxy.economics.usage import BilledUsage
from proxy.state.ledgers import Entry
from proxy.state.timeline import Turn, with_turn

PACE_KEY = "pace"  # the pace record's key inside the ledger entry
MIN_SAMPLES = 2  # growing requests seen before the growth is trusted
CACHE_TTL_SECONDS = 300.0  # Anthropic's default cache life; OpenAI's lasts 5-10 minutes idle


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

    def grown_to(self, tokens: int) -> Pace:
        """The record once a request with a history of ``tokens`` is seen."""
        if self.tokens <= 0 or tokens <= self.tokens:  # first seen, or a retry, edit, fork
            return replace(self, tokens=tokens)
        samples = self.samples + 1
        growth = self.growth + (tokens - self.tokens - self.growth) / samples
        return replace(self, tokens=tokens, samples=samples, growth=growth)

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
        seen = replace(pace.grown_to(self.tokens), policy=self.policy, at=at)
        if self.applied is not None and self.applied == seen.unapplied:
            seen = replace(seen, unapplied=None, unapplied_count=0)
        return seen


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


@dataclass(slots=True)
class Answered:
    """What one answer does to the entry: its price on the ledger and its point on the timeline
    (``priced``, when the provider reported usage), and its request on the pace (``pace``).
    Applied by the store's compare-and-set, perhaps more than once (a concurrent writer won):
    ``before`` and ``after`` are the ledger of the application that was written."""

    at: float
    priced: Priced | None
    pace: PaceSample | None
    before: Ledger = field(default_factory=Ledger)
    after: Ledger = field(default_factory=Ledger)

    def __call__(self, entry: Entry | None) -> Entry:
        changed = dict(entry or {})
        if self.pace is not None:
            pace = self.pace.into(Pace.from_entry(entry), self.at)
            changed[PACE_KEY] = asdict(pace)
        priced = self.priced
        if priced is None:
            return changed
        ledger, at = ledger_of(entry)
        warm = at is not None and 0 <= self.at - at < CACHE_TTL_SECONDS
        self.before = ledger
        self.after = add_request(
            ledger, priced.usage, priced.price, full_prompt_tokens=priced.full_tokens, warm=warm
        )
        changed.update(self.after.to_dict(), at=self.at, model=priced.model)
        return with_turn(changed, priced.turn)


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
        return {**(entry or {}), PACE_KEY: asdict(pace)}
