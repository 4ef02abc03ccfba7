"""Dollars per million tokens for a model: the user's ``pricing:`` entries, then a built-in table.

Prices change, and every figure here is dated: each entry says when it was read (``as_of``) and
the comment above its family names the source. Users correct or extend the table with
``pricing.models`` (proxy/config/pricing.py) without waiting for a release. What an entry
prices is the kinds of token a response's usage reports (``proxy.economics.usage``):

- OpenAI bills no cache write (before the GPT-5.6 family, not in this table): written tokens cost
  what input costs, so ``cache_write`` equals ``input``; cached input is a half (GPT-4o,
  o1, o3-mini), a quarter (GPT-4.1, o3, o4-mini) or a tenth (GPT-5) of input.
- Anthropic writes the 5-minute cache at 1.25x input and reads it at 0.1x.

Long-context tiers (GPT-5.4 and 5.5 above 272k prompt tokens), Batch and priority prices are not
modelled: the table is for interactive calls at standard prices.

A model name is matched by glob (``fnmatch``, case-insensitive), the first match winning, so a
dated snapshot (``gpt-4.1-2025-04-14``, ``claude-sonnet-4-5-20250929``) finds its family and
specific globs come before their family's catch-all. A gateway's prefix (``openai/gpt-4.1``) is
tried without it too. A model nothing matches is priced as ``pricing.default`` when set, else
unpriced (0 dollars, ``Price.priced`` false), with a warning logged once per model: never an
error, since a request must not fail because its model has no price. The price trigger still
decides for such a model, at ``pricing.reference`` (``PriceTable.for_decision``): it is never
what the ledger bills.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from proxy.config.pricing import ModelPrice, PricingSettings
from proxy.economics.usage import BilledUsage

__all__ = ["BUILTIN_PRICES", "UNPRICED", "Price", "PriceSource", "PriceTable"]

log = logging.getLogger("proxy.pricing")

PER_MILLION = 1_000_000
READ_ON = "2026-11-24"  # when the built-in entries were read
MAX_REMEMBERED = 1024  # model names whose price is remembered (and warned about) at once

PriceSource = Literal["config", "builtin", "default", "unpriced", "reference"]


@dataclass(frozen=True, slots=True)
class Price:
    """A model's prices in dollars per million tokens, and where they came from."""

    input: float
    cached_input: float
    cache_write: float
    output: float
    glob: str = "*"  # the entry that matched
    source: PriceSource = "builtin"
    as_of: str | None = READ_ON  # when a built-in entry was read; None for the user's own

    @property
    def priced(self) -> bool:
        """False for a model no entry and no default prices: its dollars are all 0."""
        return self.source != "unpriced"

    def cost(self, usage: BilledUsage) -> float:
        """Dollars for one request billed as ``usage``."""
        return (
            usage.input_uncached * self.input
            + usage.cached_read * self.cached_input
            + usage.cache_write * self.cache_write
            + usage.output * self.output
        ) / PER_MILLION


UNPRICED = Price(0.0, 0.0, 0.0, 0.0, source="unpriced", as_of=None)


def _openai(glob: str, input: float, cached: float, output: float) -> Price:
    return Price(input, cached, input, output, glob=glob)  # no write fee


def _anthropic(glob: str, input: float, output: float) -> Price:
    return Price(input, round(input * 0.1, 6), round(input * 1.25, 6), output, glob=glob)


BUILTIN_PRICES: tuple[Price, ...] = (
    # OpenAI GPT-4.1 and GPT-4o: the OpenAI rows of Vercel's AI Gateway model pages (gpt-4.1,
    # gpt-4.1-mini: input, output, cache read) and simonw/llm-prices data/openai.json (nano,
    # GPT-4o, GPT-4o mini, with cached input); gpt-4o-2024-05-13 from the openai_responses
    # package's table (platform.openai.com/docs/pricing, 2025-06-03), it has no cached price.
    _openai("gpt-4.1-mini*", 0.40, 0.10, 1.60),
    _openai("gpt-4.1-nano*", 0.10, 0.025, 0.40),
    _openai("gpt-4.1*", 2.00, 0.50, 8.00),
    _openai("gpt-4o-mini*", 0.15, 0.075, 0.60),
    _openai("gpt-4o-2024-05-13", 5.00, 5.00, 15.00),
    _openai("gpt-4o*", 2.50, 1.25, 10.00),
    # OpenAI GPT-5 family: developers.openai.com model pages (gpt-5-nano, gpt-5-codex),
    # github/docs data/tables/copilot/models-and-pricing.yml (GPT-5 mini, GPT-5.3-Codex, GPT-5.4,
    # 5.4 mini, 5.4 nano, 5.5; up to 272k prompt tokens) and simonw/llm-prices data/openai.json (GPT-5,
    # 5.1, 5.2, the pro models, which have no cached price). "gpt-5" and "gpt-5-*" last: they
    # would catch the others' names.
    _openai("gpt-5-pro*", 15.00, 15.00, 120.00),
    _openai("gpt-5-mini*", 0.25, 0.025, 2.00),
    _openai("gpt-5-nano*", 0.05, 0.005, 0.40),
    _openai("gpt-5.1-codex-mini*", 0.25, 0.025, 2.00),
    _openai("gpt-5.1*", 1.25, 0.125, 10.00),
    _openai("gpt-5.2-pro*", 21.00, 21.00, 168.00),
    _openai("gpt-5.2*", 1.75, 0.175, 14.00),
    _openai("gpt-5.3-codex*", 1.75, 0.175, 14.00),
    _openai("gpt-5.4-pro*", 30.00, 30.00, 180.00),
    _openai("gpt-5.4-mini*", 0.75, 0.075, 4.50),
    _openai("gpt-5.4-nano*", 0.20, 0.02, 1.25),
    _openai("gpt-5.4*", 2.50, 0.25, 15.00),
    _openai("gpt-5.5-pro*", 30.00, 30.00, 180.00),
    _openai("gpt-5.5*", 5.00, 0.50, 30.00),
    _openai("gpt-5", 1.25, 0.125, 10.00),
    _openai("gpt-5-*", 1.25, 0.125, 10.00),  # dated snapshots, gpt-5-codex, gpt-5-chat-latest
    # OpenAI o-series: simonw/llm-prices data/openai.json (o1, o1-mini, o1-pro, o3-mini, o3-pro,
    # o4-mini, the deep-research models); o3 at its June 2025 price, $2 / $8 (deploybase.ai's
    # copy of the pricing page, March 2026), cached $0.50 (llm-prices).
    _openai("o1-pro*", 150.00, 150.00, 600.00),
    _openai("o1-mini*", 1.10, 0.55, 4.40),
    _openai("o1*", 15.00, 7.50, 60.00),
    _openai("o3-pro*", 20.00, 20.00, 80.00),
    _openai("o3-mini*", 1.10, 0.55, 4.40),
    _openai("o3-deep-research*", 10.00, 2.50, 40.00),
    _openai("o3*", 2.00, 0.50, 8.00),
    _openai("o4-mini-deep-research*", 2.00, 0.50, 8.00),
    _openai("o4-mini*", 1.10, 0.275, 4.40),
    # Anthropic Claude 4.x: platform.claude.com docs/about-claude/pricing, "Model pricing" (5m
    # cache writes 1.25x, cache hits 0.1x of base input). Opus 4 and 4.1 keep the old $15 / $75;
    # Opus 4.5 and later 4.x are $5 / $25. Leading `*`: gateways prefix the name
    # (`anthropic.claude-...` on Bedrock).
    _anthropic("*claude-opus-4-1*", 15.00, 75.00),
    _anthropic("*claude-opus-4.1*", 15.00, 75.00),
    _anthropic("*claude-opus-4-0*", 15.00, 75.00),
    _anthropic("*claude-opus-4-2025*", 15.00, 75.00),  # claude-opus-4-20250514
    _anthropic("*claude-opus-4@*", 15.00, 75.00),  # Vertex: claude-opus-4@20250514
    _anthropic("*claude-4-opus*", 15.00, 75.00),
    _anthropic("*claude-opus-4*", 5.00, 25.00),  # 4.5 to 4.8
    _anthropic("*claude-sonnet-4*", 3.00, 15.00),  # 4, 4.5, 4.6
    _anthropic("*claude-4-sonnet*", 3.00, 15.00),
    _anthropic("*claude-haiku-4*", 1.00, 5.00),  # 4.5
)


def _from_settings(glob: str, entry: ModelPrice, source: PriceSource) -> Price:
    return Price(
        input=entry.input,
        cached_input=entry.input if entry.cached_input is None else entry.cached_input,
        cache_write=entry.input if entry.cache_write is None else entry.cache_write,
        output=entry.output,
        glob=glob,
        source=source,
        as_of=None,
    )


class PriceTable:
    """Prices by model name: the user's entries, the built-in table, then the default.

    One per process, built at start-up: it remembers each name's price (so a request costs a
    dict lookup) and which unknown names it has warned about, a bounded number of them.
    """

    def __init__(
        self,
        settings: PricingSettings | None = None,
        *,
        builtin: tuple[Price, ...] = BUILTIN_PRICES,
    ) -> None:
        settings = settings or PricingSettings()
        own = [_from_settings(g, e, "config") for g, e in settings.models.items()]
        self._entries = (*own, *builtin)
        self._default = (
            UNPRICED
            if settings.default is None
            else _from_settings("*", settings.default, "default")
        )
        self._reference = (
            None
            if settings.reference is None
            else _from_settings("*", settings.reference, "reference")
        )
        self._known: dict[str, Price] = {}

    @property
    def reference(self) -> Price | None:
        """What the price trigger assumes for an unpriced model; None: it does not decide."""
        return self._reference

    def for_decision(self, model: str) -> Price:
        """``model``'s price for deciding whether compacting pays: its own, else the reference
        (unpriced when there is none). Never for billing: the ledger keeps ``price``."""
        found = self.price(model)
        if found.priced or self._reference is None:
            return found
        return self._reference

    def price(self, model: str) -> Price:
        """``model``'s price; for a model no entry names, the default (warned once)."""
        found = self._known.get(model)
        if found is None:
            found = self._match(model)
            if len(self._known) >= MAX_REMEMBERED:
                del self._known[next(iter(self._known))]  # the oldest name
            self._known[model] = found
            if found.source in ("default", "unpriced"):
                log.warning(
                    "no price for model %r: %s; set pricing.models in the config to price it",
                    model,
                    "priced as pricing.default" if found.priced else "counted as unpriced ($0)",
                )
        return found

    def _match(self, model: str) -> Price:
        name = model.lower()
        names = (name, name.rsplit("/", 1)[-1]) if "/" in name else (name,)
        for entry in self._entries:
            glob = entry.glob.lower()
            if any(fnmatchcase(n, glob) for n in names):
                return entry
        return self._default
