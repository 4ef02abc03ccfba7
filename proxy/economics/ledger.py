"""A conversation's ledger: what it cost through the proxy, and what sending it direct would have.

Pure arithmetic on ``BilledUsage`` and ``Price``; the caller reads the usage, looks up the price
and stores the ledger (a small dict, beside the conversation's checkpoints).

Spent is what the provider billed: each request's usage at its price, and apart from it every
summarizer call. Saved is the counterfactual minus both: what the same turns would have cost
sent straight to the provider with the client's full history, under the same caching.

The counterfactual, per request (``counterfactual_cost``), kept deliberately simple:

- When the proxy sent the request as the client did (its prompt is the full history: pass
  ``full_prompt_tokens`` equal to ``usage.prompt``, or less), the direct run would have been
  billed exactly the same: the counterfactual is the request's actual cost.
- Otherwise the direct run's prompt is the full history, ``H`` tokens. A history only grows, so
  the previous request's full history ``H_prev`` is a prefix of it; with a warm cache (the
  conversation's previous request less than the cache's TTL ago) that prefix is read at the
  cached price and the new tail ``H - H_prev`` is billed at the cache-write price. Under
  OpenAI's rule the write price is the input price (no write fee), so the tail is plain input;
  under Anthropic's it is the 1.25x write of a client whose breakpoint moves to the end of each
  turn (as Claude Code does). With a cold cache the whole ``H`` is written again.
- The answer (output tokens) is the same in both worlds and priced alike.

Not modelled: OpenAI's 1,024-token minimum and 128-token blocks, a client that marks no
Anthropic breakpoint (the direct run would then pay more than modelled, so the saving shown is
the smaller one), and histories the client edits (the prefix is then shorter than ``H_prev``).
Token counts are the provider's: a compacted request's ``full_prompt_tokens`` is the proxy's
count of the full history, calibrated to the provider's tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from proxy.economics.prices import PER_MILLION, Price
from proxy.economics.usage import BilledUsage

__all__ = ["LEDGER_VERSION", "Ledger", "add_request", "add_summary", "counterfactual_cost"]

LEDGER_VERSION = 1  # the "v" of the stored dict; another version is read as a fresh ledger


@dataclass(frozen=True, slots=True)
class Ledger:
    """One conversation's totals: tokens as billed, dollars spent and saved."""

    requests: int = 0
    prompt_tokens: int = 0  # every prompt token the provider billed, however
    cached_tokens: int = 0  # of which read from the prompt cache
    cache_write_tokens: int = 0  # of which written to it
    output_tokens: int = 0
    summaries: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    unpriced: int = 0  # requests and summaries whose model had no price (counted as $0)
    spent: float = 0.0  # dollars, the conversation's own requests
    summarizer_spent: float = 0.0  # dollars, the summarizer's calls
    counterfactual: float = 0.0  # dollars the same requests would have cost sent direct
    full_prompt_tokens: int = 0  # the prompt tokens the direct run would have sent
    last_full_tokens: int = 0  # the full history's size at the last request: the next prefix

    @property
    def total_spent(self) -> float:
        """Dollars billed for this conversation, the summarizer's included."""
        return self.spent + self.summarizer_spent

    @property
    def saved(self) -> float:
        """Net dollars saved against sending direct; negative when compaction cost more."""
        return self.counterfactual - self.spent - self.summarizer_spent

    def to_dict(self) -> dict[str, int | float]:
        """A small JSON-ready dict, stored beside the checkpoints: ``"v"``, then every field in
        its order (named one by one: built after every answer, where ``asdict`` deep-copies
        each and even a loop over the names costs several times more)."""
        return {
            "v": LEDGER_VERSION,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "summaries": self.summaries,
            "summarizer_input_tokens": self.summarizer_input_tokens,
            "summarizer_output_tokens": self.summarizer_output_tokens,
            "unpriced": self.unpriced,
            "spent": self.spent,
            "summarizer_spent": self.summarizer_spent,
            "counterfactual": self.counterfactual,
            "full_prompt_tokens": self.full_prompt_tokens,
            "last_full_tokens": self.last_full_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Ledger:
        """The ledger ``to_dict`` wrote. A key it lacks is 0 (a field added later); another
        version is read as a fresh ledger; a value of the wrong type is a ValueError."""
        if data.get("v", LEDGER_VERSION) != LEDGER_VERSION:
            return cls()
        values: dict[str, Any] = {}  # each field's own type, checked below (JSON comes in here)
        for name, default, kind in _KINDS:  # read after every answer: the fields listed once
            value = data.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"ledger field {name} is not a number: {value!r}")
            if kind is int and not isinstance(value, int):
                raise ValueError(f"ledger field {name} is not an integer: {value!r}")
            values[name] = kind(value)
        return cls(**values)


# Each field's name, default and type (a float default makes a float field).
_KINDS = tuple(
    (f.name, f.default, float if isinstance(f.default, float) else int) for f in fields(Ledger)
)


def counterfactual_cost(
    price: Price,
    *,
    full_prompt_tokens: int,
    previous_full_tokens: int,
    output_tokens: int,
    warm: bool,
) -> float:
    """Dollars a direct request of ``full_prompt_tokens`` would have cost (see the module
    docstring): the previous full history read from the cache when ``warm``, the rest written."""
    prefix = min(previous_full_tokens, full_prompt_tokens) if warm else 0
    tail = full_prompt_tokens - prefix
    return (
        prefix * price.cached_input + tail * price.cache_write + output_tokens * price.output
    ) / PER_MILLION


def add_request(
    ledger: Ledger,
    usage: BilledUsage,
    price: Price,
    *,
    full_prompt_tokens: int,
    warm: bool,
) -> Ledger:
    """``ledger`` with one more request, billed as ``usage`` at ``price``. ``full_prompt_tokens``
    is the client's full history in the provider's tokens (``usage.prompt`` when the proxy
    changed nothing); ``warm``: the conversation's previous request was within the cache TTL."""
    spent = price.cost(usage)
    if full_prompt_tokens <= usage.prompt:
        counterfactual = spent  # sent as the client sent it: the direct run's own bill
    else:
        counterfactual = counterfactual_cost(
            price,
            full_prompt_tokens=full_prompt_tokens,
            previous_full_tokens=ledger.last_full_tokens,
            output_tokens=usage.output,
            warm=warm,
        )
    full = max(full_prompt_tokens, usage.prompt)
    # Built whole, every field named (``dataclasses.replace`` costs several times more, and
    # this runs after every answer).
    return Ledger(
        requests=ledger.requests + 1,
        prompt_tokens=ledger.prompt_tokens + usage.prompt,
        cached_tokens=ledger.cached_tokens + usage.cached_read,
        cache_write_tokens=ledger.cache_write_tokens + usage.cache_write,
        output_tokens=ledger.output_tokens + usage.output,
        summaries=ledger.summaries,
        summarizer_input_tokens=ledger.summarizer_input_tokens,
        summarizer_output_tokens=ledger.summarizer_output_tokens,
        unpriced=ledger.unpriced + (not price.priced),
        spent=ledger.spent + spent,
        summarizer_spent=ledger.summarizer_spent,
        counterfactual=ledger.counterfactual + counterfactual,
        full_prompt_tokens=ledger.full_prompt_tokens + full,
        last_full_tokens=full,
    )


def add_summary(ledger: Ledger, usage: BilledUsage, price: Price) -> Ledger:
    """``ledger`` with one more summarizer call, billed as ``usage`` at ``price`` (the
    summarizer's model's price). A summary is a cost the direct run never has."""
    return replace(
        ledger,
        summaries=ledger.summaries + 1,
        summarizer_input_tokens=ledger.summarizer_input_tokens + usage.prompt,
        summarizer_output_tokens=ledger.summarizer_output_tokens + usage.output,
        unpriced=ledger.unpriced + (not price.priced),
        summarizer_spent=ledger.summarizer_spent + price.cost(usage),
    )
