"""What compaction tells whoever listens (``proxy.events.Listeners``): metrics, hooks and the
summary export subscribe to these in ``proxy.app``; compaction imports none of them.

Every event is small, immutable and emitted where the fact happens; listeners must not block
(``proxy.events``).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.checkpoints import Checkpoint


@dataclass(frozen=True, slots=True)
class CompactionDecided:
    """One request's compaction outcome (``X-Compaction``); tokens are absent for ``off``."""

    strategy: str
    outcome: str  # applied, skipped, pending, blocked, failed, off
    tokens_before: int | None = None
    tokens_after: int | None = None
    applied: str = ""  # X-Compaction-Applied: summary, stubs, dropped joined by "+"; "" none
    headroom_short: bool = False  # a compaction the policy's numbers leave no room to grow


@dataclass(frozen=True, slots=True)
class SummaryMade:
    """The summarizer wrote a summary (``mode``: inline, ahead, rescue, admin)."""

    mode: str
    seconds: float
    input_tokens: int  # of the turns it read
    output_tokens: int  # of the summary


@dataclass(frozen=True, slots=True)
class SummaryFailed:
    """The summarizer gave no summary (``reason``: timeout, error)."""

    mode: str
    reason: str


@dataclass(frozen=True, slots=True)
class SummaryStored:
    """A new checkpoint was stored: what hooks' ``after_summary`` and the export hear."""

    tenant: str  # as the admin API shows it
    conversation_id: str
    policy: str
    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class SummaryOmitted:
    """A summary left out the oldest part of its turns (``summarizer.max_summarized_tokens``)."""

    tokens: int  # about how many


@dataclass(frozen=True, slots=True)
class OverflowRetry:
    """After a context-overflow answer: ``retried`` compacted harder, or ``not_smaller``."""

    outcome: str


@dataclass(frozen=True, slots=True)
class AheadOfTimeDropped:
    """An ahead-of-time summary was not queued: the background queue is full."""


@dataclass(frozen=True, slots=True)
class SummaryUnused:
    """Summaries made and never applied: superseded by a newer summary that does not extend
    them (``count``: the superseded one and those it extended, none applied)."""

    policy: str
    count: int


@dataclass(frozen=True, slots=True)
class WindowDiscovered:
    """A model's window was asked of the provider's /models (``outcome``: ok, missing, failed)."""

    outcome: str


@dataclass(frozen=True, slots=True)
class WindowLearned:
    """A model's window was learned (anew) from an overflow answer."""

    model: str
    window: int


@dataclass(frozen=True, slots=True)
class CalibrationSampled:
    """A response's usage was folded into a model's token factor (``used``) or not (``ignored``)."""

    outcome: str


@dataclass(frozen=True, slots=True)
class RequestPriced:
    """One answered request priced from the provider's usage (``proxy.compaction.money.spending``):
    dollars billed and what sending the client's full history direct would have cost."""

    policy: str
    priced: bool  # the model had a price (an unpriced one counts $0)
    spent: float  # dollars
    direct: float  # dollars, the counterfactual (docs/cost.md)
    prompt_tokens: int
    cached_tokens: int  # read from the provider's prompt cache
    cache_write_tokens: int  # written to it
    output_tokens: int


@dataclass(frozen=True, slots=True)
class SummaryPriced:
    """A summarizer call priced at the summarizer model's price (dollars)."""

    policy: str
    dollars: float
