"""What a replayed transcript's prompts cost, in dollars with prompt caching, through the proxy
and sent direct (``compaction-proxy eval`` reports dollars beside accuracy).

Each request of a replay is priced at the model's prices (``pricing:``, then the built-in table)
under OpenAI's automatic caching: the leading messages a request shares with the one before it
(and the tools) are read from the cache when they make 1,024 tokens or more, in whole 128-token
blocks; the rest is written at the input price. Sent direct, each request carries the full
history, which only grows, so each reads its predecessor from the cache. The replay sends its
turns back to back: every cache is warm. Summaries are added at the summarizer model's prices:
a quoted summary's tokens billed in full, a summary asked on the cached prefix priced like a
request after the one it follows. The answers are left out: the replay's are canned, and a
model's answers cost the same with or without the proxy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.economics.prices import PER_MILLION, Price
from proxy.tools.evaluation.proxy_parts import TokenCounter

MIN_CACHED = 1024  # OpenAI caches prompts of 1,024 tokens or more...
BLOCK = 128  # ...in blocks of 128 tokens


@dataclass(frozen=True)
class Dollars:
    """One policy's replays: prompts sent through the proxy, its summaries, and direct."""

    spent: float
    summarizer: float
    direct: float

    @property
    def vs_direct(self) -> float | None:
        """The proxy's total (prompts and summaries) as a share of direct's."""
        return round((self.spent + self.summarizer) / self.direct, 4) if self.direct else None

    def __add__(self, other: Dollars) -> Dollars:
        return Dollars(
            self.spent + other.spent,
            self.summarizer + other.summarizer,
            self.direct + other.direct,
        )


def prompts_dollars(
    prompts: Sequence[Sequence[dict[str, Any]]],
    tools: object,
    *,
    counter: TokenCounter,
    model: str,
    price: Price,
) -> float:
    """Dollars of sending ``prompts`` one after the other (each cached against the previous)."""
    tool_tokens = counter.count_tools(tools, model)
    total = 0.0
    previous: Sequence[dict[str, Any]] = ()
    for messages in prompts:
        counts = counter.per_message(list(messages), model)
        shared = _shared(previous, messages)
        cached = tool_tokens + sum(counts[:shared]) if previous else 0
        cached = cached // BLOCK * BLOCK if cached >= MIN_CACHED else 0
        tokens = tool_tokens + sum(counts)
        total += (tokens - cached) * price.input + cached * price.cached_input
        previous = messages
    return total / PER_MILLION


def quoted_summaries_dollars(input_tokens: int, output_tokens: int, price: Price) -> float:
    """Dollars of quoted summaries: a prompt no provider has cached."""
    return (input_tokens * price.input + output_tokens * price.output) / PER_MILLION


def _shared(previous: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]]) -> int:
    """How many leading messages the two prompts share."""
    n = 0
    for a, b in zip(previous, messages, strict=False):
        if a != b:
            break
        n += 1
    return n
