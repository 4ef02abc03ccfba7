"""The cost benchmark as users run the proxy: real model names, shipped configs untouched.

The told-prices runs (``bench_cost``) give the proxy the bench's models with a 200k window and
the prices they are billed at. A user changes nothing: the proxy then decides with its own price
table, its own windows (gpt-4.1's 1M, gpt-5's 400k, Sonnet's 200k) and the summarizer its config
names. This mode runs exactly that:

- configs: ``config/proxy.yaml`` (the default), ``config/examples/coding-agent.yaml`` and
  ``long-chat.yaml``, each as shipped; only where it runs is set (the upstream is the bench's
  provider, a memory store with a fixed tenant secret, quiet logs);
- cells: gpt-4.1, gpt-5 and claude-sonnet-4-5 through chat completions (OpenAI's prefix
  caching), and claude-sonnet-4-5 through Messages (Anthropic's breakpoints), each turn billed at
  its model's public price (``prices.py``), the summarizer's calls at the summarizer's;
- pace: an answer every ``TURN_SECONDS`` (20 s: a warm cache throughout), summaries at most
  ``SUMMARY_TOKENS`` long (the mock writes a tenth of the prompt otherwise: a real summarizer
  writes a few hundred tokens);
- transcripts: the bench's seeded ones and the public sessions of real agents under
  ``fixtures/``.

Every cell is printed as a ratio to sending the same turns direct in the same cell.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from proxy.app import create_app
from proxy.config.settings import parse_settings
from proxy.server.run import uvicorn_options
from tests.bench.cost.prices import GPT_4O_MINI, PRICE_MODELS, PriceModel
from tests.bench.cost.provider import BillingLine, CachingProvider
from tests.bench.cost.replay import Rule, Seen, Target, replay
from tests.bench.cost.setups import SETTLE_SECONDS, SimClock, merged
from tests.bench.cost.transcripts import Transcript
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

REPO = Path(__file__).resolve().parents[3]
CONFIGS = (
    ("default", REPO / "config" / "proxy.yaml"),
    ("coding-agent.yaml", REPO / "config" / "examples" / "coding-agent.yaml"),
    ("long-chat.yaml", REPO / "config" / "examples" / "long-chat.yaml"),
)
SUMMARIZER = "gpt-4o-mini"  # what every shipped config names
TURN_SECONDS = 20.0
SUMMARY_TOKENS = 800
_PRICES = {p.name: p for p in PRICE_MODELS}


@dataclass(frozen=True)
class Cell:
    """A model as users name it, the caching rule it is billed under, and its price."""

    name: str
    rule: Rule
    price: PriceModel


CELLS = (
    Cell("gpt-4.1", Rule("openai", "gpt-4.1", "chat"), _PRICES["gpt-4.1"]),
    Cell("gpt-5", Rule("openai", "gpt-5", "chat"), _PRICES["gpt-5"]),
    Cell("sonnet/openai", Rule("openai", "claude-sonnet-4-5", "chat"), _PRICES["sonnet-4.5"]),
    Cell(
        "sonnet/anthropic",
        Rule("anthropic", "claude-sonnet-4-5", "messages"),
        _PRICES["sonnet-4.5"],
    ),
)


@dataclass(frozen=True)
class UserRun:
    transcript: str
    cell: Cell
    config: str  # "direct" or a config's name
    lines: list[BillingLine]
    seen: Seen
    seconds: float

    def cost(self) -> float:
        return sum(self._price(line).cost(line.usage, line.output) for line in self.lines)

    def summary_cost(self) -> float:
        return sum(
            self._price(line).cost(line.usage, line.output)
            for line in self.lines
            if line.summarizer
        )

    def _price(self, line: BillingLine) -> PriceModel:
        return GPT_4O_MINI if line.model == SUMMARIZER else self.cell.price

    @property
    def turns(self) -> list[BillingLine]:
        return [line for line in self.lines if not line.summarizer]

    @property
    def summaries(self) -> int:
        return sum(1 for line in self.lines if line.summarizer)

    @property
    def largest(self) -> int:
        return max((line.usage.prompt for line in self.turns), default=0)

    @property
    def hit_rate(self) -> float:
        prompt = sum(line.usage.prompt for line in self.lines)
        return sum(line.usage.cached for line in self.lines) / prompt if prompt else 0.0


def paced(transcript: Transcript) -> Transcript:
    """The transcript with one answer every ``TURN_SECONDS``."""
    times = tuple(TURN_SECONDS * k for k in range(len(transcript.times)))
    return replace(transcript, times=times)


def config_text(path: Path, url: str) -> str:
    """The shipped config, only told where the bench's provider and a store are."""
    shipped = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    where: dict[str, Any] = {
        "server": {"access_log": False, "log_level": "warning"},
        "upstream": {"base_url": f"{url}/v1", "anthropic_base_url": url},
        "store": {"url": "memory://", "tenant_secret": "bench-cost-tenant-secret-0123456789"},
    }
    return yaml.safe_dump(merged(shipped, where), sort_keys=False)


@contextlib.contextmanager
def target(
    config: Path | None, url: str, *, route: str, conversation: str, clock: SimClock
) -> Iterator[Target]:
    def at(seconds: float) -> None:
        clock.now = seconds

    if config is None:
        yield Target(url, {}, settle=lambda answered: None, at=at)
        return
    settings = parse_settings(config_text(config, url), source=str(config), environ={})
    with ThreadedUvicorn(create_app(settings, clock=clock), **uvicorn_options(settings)) as server:

        def settled(answered: int) -> None:
            settle(server.url, route=route, answered=answered, timeout=SETTLE_SECONDS)

        yield Target(server.url, {"X-Conversation-Id": conversation}, settle=settled, at=at)


def bench(transcripts: list[Transcript], configs: tuple[tuple[str, Path], ...]) -> list[UserRun]:
    models = tuple(dict.fromkeys(cell.rule.model for cell in CELLS))
    provider = CachingProvider(
        summarizer_model=SUMMARIZER, models=models, max_summary_tokens=SUMMARY_TOKENS
    )
    clock = SimClock()
    runs: list[UserRun] = []
    with ThreadedUvicorn(provider.app) as upstream:
        for transcript in map(paced, transcripts):
            for cell in CELLS:
                for name, path in (("direct", None), *configs):
                    print(
                        f"[as users] {transcript.name} / {cell.name} / {name} ...", file=sys.stderr
                    )
                    provider.reset()
                    started = time.perf_counter()
                    conversation = re.sub(
                        r"[^A-Za-z0-9._-]+", "-", f"{transcript.name}-{cell.name}"
                    )
                    with target(
                        path,
                        upstream.url,
                        route=cell.rule.route,
                        conversation=conversation,
                        clock=clock,
                    ) as where:
                        seen = replay(transcript, cell.rule, where, provider.tokenizer)
                    runs.append(
                        UserRun(
                            transcript.name,
                            cell,
                            name,
                            provider.lines(),
                            seen,
                            time.perf_counter() - started,
                        )
                    )
    return runs


def report(runs: list[UserRun], configs: tuple[tuple[str, Path], ...]) -> None:
    names = list(dict.fromkeys(r.transcript for r in runs))
    found = {(r.transcript, r.cell.name, r.config): r for r in runs}
    cells = " / ".join(c.name for c in CELLS)
    print(
        f"\nAs users run it: real model names, shipped configs untouched, {TURN_SECONDS:.0f} s "
        f"between turns, summaries <= {SUMMARY_TOKENS} tokens; x direct, {cells}:"
    )
    print(f"{'transcript (turns, largest direct)':<56}" + "".join(f"{c:<26}" for c, _ in configs))
    for name in names:
        direct = found[(name, CELLS[0].name, "direct")]
        label = f"{name}: {len(direct.turns)} turns, {direct.largest // 1000}k"
        row = []
        for config, _ in configs:
            ratios = [
                found[(name, c.name, config)].cost() / found[(name, c.name, "direct")].cost()
                for c in CELLS
            ]
            row.append(" ".join(f"{r:.2f}" for r in ratios))
        print(f"{label:<56}" + "".join(f"{c:<26}" for c in row))
    print(
        f"\nPer run (summ. = summarizer calls; hit rate = cached / all prompt tokens):\n"
        f"{'transcript':<40}{'cell':<18}{'config':<19}{'turns':>6}{'summ.':>6}{'summ. $':>9}"
        f"{'hit rate':>9}{'largest':>9}{'x direct':>9}  X-Compaction"
    )
    for run in runs:
        direct = found[(run.transcript, run.cell.name, "direct")].cost()
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(run.seen.outcomes.items()))
        print(
            f"{run.transcript[:39]:<40}{run.cell.name:<18}{run.config:<19}{len(run.turns):>6}"
            f"{run.summaries:>6}{run.summary_cost():>9.3f}{run.hit_rate:>9.1%}{run.largest:>9,}"
            f"{run.cost() / direct:>9.2f}  {outcomes}"
        )
