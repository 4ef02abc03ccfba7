"""Why a users-mode cell costs what it does: one transcript played direct and through one shipped
config, turn by turn, side by side.

Run: python -m tests.bench.cost.why --transcript "opencode session (65)" --config long-chat.yaml
     [--cells gpt-4.1,sonnet/anthropic]     (--config: a shipped config's name or a file)

About 15 s per cell for a 100-turn public session, 45 s for the seeded coding agent.

Per turn: the prompt the provider billed direct and proxied (all / cached / written at the
cache-write price), each side's dollars, the running difference, the proxy's X-Compaction
headers (outcome, tokens before and after, what was applied) and, in line, every summarizer call
(its prompt and output, its dollars). A row is marked where the proxied prompt lost cached tokens
that the direct one kept (a cache break): the tokens re-billed and what they cost over the cached
price.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken"))

from tests.bench.cost import as_users  # noqa: E402
from tests.bench.cost.prices import GPT_4O_MINI, PriceModel  # noqa: E402
from tests.bench.cost.provider import BillingLine, CachingProvider  # noqa: E402
from tests.bench.cost.replay import Seen, replay  # noqa: E402
from tests.bench.cost.setups import SimClock  # noqa: E402
from tests.bench.cost.transcripts import Transcript, public_transcripts, transcripts  # noqa: E402
from tests.support.servers import ThreadedUvicorn  # noqa: E402


@dataclass
class Headed(Seen):
    """What the client saw, with every answer's compaction headers in order."""

    headers: list[dict[str, str]] = field(default_factory=list)

    def response(self, response: Any) -> None:
        super().response(response)
        self.headers.append(
            {k: v for k, v in response.headers.items() if k.lower().startswith("x-compaction")}
        )


def played(
    provider: CachingProvider,
    url: str,
    transcript: Transcript,
    cell: as_users.Cell,
    config: Path | None,
) -> tuple[list[BillingLine], Headed]:
    """One run of ``transcript`` in ``cell``, direct (``config`` None) or through the proxy."""
    provider.reset()
    seen = Headed()
    conversation = f"why-{cell.name.replace('/', '-')}"
    with as_users.target(
        config, url, route=cell.rule.route, conversation=conversation, clock=SimClock()
    ) as where:
        replay(transcript, cell.rule, where, provider.tokenizer, seen)
    return provider.lines(), seen


def price_of(line: BillingLine, cell: as_users.Cell) -> PriceModel:
    return GPT_4O_MINI if line.model == as_users.SUMMARIZER else cell.price


def rows(
    direct: list[BillingLine], proxied: list[BillingLine], seen: Headed, cell: as_users.Cell
) -> Iterator[str]:
    turns = [line for line in direct if not line.summarizer]
    k = -1
    total = 0.0
    made = 0.0  # summarizer dollars since the previous turn
    before: tuple[BillingLine, BillingLine] | None = None  # the previous turn, direct and proxied
    for line in proxied:
        cost = price_of(line, cell).cost(line.usage, line.output)
        if line.summarizer:
            total += cost
            made += cost
            yield (
                f"{'':>4} summary {line.model:<18} in {line.usage.prompt:>7,} cached "
                f"{line.usage.cached:>7,} out {line.output:>5}  ${cost:.4f}  diff {total:+.4f}"
            )
            continue
        k += 1
        d = turns[k]
        dcost = cell.price.cost(d.usage, d.output)
        total += cost - dcost
        h = seen.headers[k] if k < len(seen.headers) else {}
        applied = h.get("x-compaction-applied", "")
        outcome = h.get("x-compaction", "")
        sizes = (
            f"{h.get('x-compaction-tokens-before', '')}->{h.get('x-compaction-tokens-after', '')}"
        )
        note = ""
        if before is not None:
            note = broken(before, (d, line), cell.price, left=len(turns) - 1 - k, made=made)
        yield (
            f"{k:>4} direct {d.usage.prompt:>7,}/{d.usage.cached:>7,}/{d.usage.written:>6,} "
            f"${dcost:.4f} | proxy {line.usage.prompt:>7,}/{line.usage.cached:>7,}/"
            f"{line.usage.written:>6,} ${cost:.4f}  diff {total:+.4f}  {outcome} {sizes} "
            f"{applied}{note}"
        )
        before = (d, line)
        made = 0.0


def broken(
    before: tuple[BillingLine, BillingLine],
    now: tuple[BillingLine, BillingLine],
    price: PriceModel,
    *,
    left: int,
    made: float,
) -> str:
    """A cache break: this proxied turn sent at least 2,048 more tokens uncached than the same
    turn direct. What that cost over the cached price (written tokens at the write price, the
    rest at the input price), what the shorter prompt saves on each later turn (the tokens it
    lost against the previous proxied prompt grown as direct grew, at the cached price) over the
    ``left`` turns still to come, and the net with ``made``, the summaries paid since."""
    (d0, p0), (d, p) = before, now
    fresh = (p.usage.prompt - p.usage.cached) - (d.usage.prompt - d.usage.cached)
    if fresh < 2048:
        return ""
    extra = (p.usage.written - d.usage.written) * (price.cache_write - price.cached_input) + (
        p.usage.uncached - d.usage.uncached
    ) * (price.input - price.cached_input)
    extra = max(extra, 0) / 1e6
    cut = p0.usage.prompt + (d.usage.prompt - d0.usage.prompt) - p.usage.prompt
    saving = max(cut, 0) * price.cached_input / 1e6
    net = saving * left - extra - made
    return (
        f"  BREAK: {fresh:,} more uncached, +${extra:.4f} over cached; prompt -{cut:,} saves "
        f"${saving:.4f}/turn x {left} left = ${saving * left:.4f}; net {net:+.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transcript", required=True, help="a substring of its name")
    parser.add_argument(
        "--config",
        required=True,
        help="default | coding-agent.yaml | long-chat.yaml, or a config file",
    )
    parser.add_argument("--cells", default=",".join(c.name for c in as_users.CELLS))
    args = parser.parse_args()
    every = [as_users.paced(t) for t in (*transcripts(), *public_transcripts())]
    transcript = next(t for t in every if args.transcript in t.name)
    config = dict(as_users.CONFIGS).get(args.config) or Path(args.config)  # a name or a path
    cells = [c for c in as_users.CELLS if c.name in args.cells.split(",")]
    models = tuple(dict.fromkeys(c.rule.model for c in as_users.CELLS))
    provider = CachingProvider(
        summarizer_model=as_users.SUMMARIZER,
        models=models,
        max_summary_tokens=as_users.SUMMARY_TOKENS,
    )
    with ThreadedUvicorn(provider.app) as upstream:
        for cell in cells:
            print(f"\n== {transcript.name} / {cell.name} / {args.config}", file=sys.stderr)
            direct, _ = played(provider, upstream.url, transcript, cell, None)
            proxied, seen = played(provider, upstream.url, transcript, cell, config)
            for row in rows(direct, proxied, seen, cell):
                print(row)
            dsum = sum(price_of(x, cell).cost(x.usage, x.output) for x in direct)
            psum = sum(price_of(x, cell).cost(x.usage, x.output) for x in proxied)
            print(f"== {cell.name}: direct ${dsum:.4f} proxy ${psum:.4f} x{psum / dsum:.3f}")


if __name__ == "__main__":
    main()
