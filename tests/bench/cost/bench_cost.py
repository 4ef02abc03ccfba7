"""What compaction costs with the providers' prompt caches counted (docs/cost.md).

Run: .venv/bin/python -m tests.bench.cost.bench_cost [--quick] [--mode told|users|both]

``--mode users`` runs the proxy as users do instead (as_users.py: real model names, the shipped
configs untouched, over the seeded transcripts and the public sessions under fixtures/);
``both`` runs that and then the told-prices runs below.

Each transcript (a 150-round coding agent, an 8-task agent ending just short of the default
trigger, an 80-turn chat) is replayed under each caching rule (OpenAI-style automatic prefix
caching through chat completions; Anthropic-style breakpoints through /v1/messages) by each setup
(straight to the provider; through the proxy with the default policy; through the proxy with
config/examples/coding-agent.yaml), against a mock provider that applies the rule and bills every
request. The billing lines are priced under three price models, and each setup's cost is printed
as a ratio to sending direct in the same run. Per run: summarizer calls and their share of the
cost, the cache hit rate (cached / all prompt tokens), the largest prompt against the window,
the X-Compaction outcomes the client saw, and whether the usage the client saw matches what was
billed (the proxy must relay it unchanged).

``--quick`` plays the transcripts at a quarter of their length against a quarter of the window:
the same machinery in under two minutes, figures not comparable with the full run (the recipe's
absolute thresholds, 60k and 24k tokens, do not scale with it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken"))

from tests.bench.cost import as_users  # noqa: E402
from tests.bench.cost.prices import PRICE_MODELS, PriceModel  # noqa: E402
from tests.bench.cost.provider import BillingLine, CachingProvider  # noqa: E402
from tests.bench.cost.replay import Rule, Seen, replay  # noqa: E402
from tests.bench.cost.setups import SETUPS, BenchModels, Setup, SimClock, target  # noqa: E402
from tests.bench.cost.transcripts import public_transcripts, transcripts  # noqa: E402
from tests.support.servers import ThreadedUvicorn  # noqa: E402

WINDOW = 200_000
SUMMARIZER = "bench-summarizer"
RULES = (Rule("openai", "bench-gpt", "chat"), Rule("anthropic", "bench-claude", "messages"))


@dataclass(frozen=True)
class Run:
    transcript: str
    rule: str
    setup: str
    price: str | None  # the price model the proxy was told; None: direct, the same for all
    lines: list[BillingLine]
    seen: Seen
    seconds: float

    @property
    def turns(self) -> list[BillingLine]:
        return [line for line in self.lines if not line.summarizer]

    @property
    def summaries(self) -> list[BillingLine]:
        return [line for line in self.lines if line.summarizer]

    def cost(self, price: PriceModel, lines: list[BillingLine] | None = None) -> float:
        lines = self.lines if lines is None else lines
        return sum(price.cost(line.usage, line.output) for line in lines)

    @property
    def hit_rate(self) -> float:
        prompt = sum(line.usage.prompt for line in self.lines)
        return sum(line.usage.cached for line in self.lines) / prompt if prompt else 0.0

    @property
    def largest(self) -> int:
        return max((line.usage.prompt for line in self.turns), default=0)

    @property
    def usage_relayed(self) -> bool:
        """The usage the client read adds up to what was billed for its turns."""
        billed = (
            len(self.turns),
            sum(line.usage.prompt for line in self.turns),
            sum(line.usage.cached for line in self.turns),
            sum(line.usage.written for line in self.turns),
            sum(line.output for line in self.turns),
        )
        seen = self.seen
        return billed == (seen.turns, seen.prompt, seen.cached, seen.written, seen.output)


def bench(
    scale: float,
    window: int,
    setups: tuple[Setup, ...] = SETUPS,
    wanted: list[str] | None = None,
) -> list[Run]:
    provider = CachingProvider(summarizer_model=SUMMARIZER, models=tuple(r.model for r in RULES))
    clock = SimClock()
    runs: list[Run] = []
    with ThreadedUvicorn(provider.app) as upstream:
        models = BenchModels(upstream.url, tuple(r.model for r in RULES), SUMMARIZER, window)
        for transcript in transcripts(scale):
            if wanted is not None and not any(w in transcript.name for w in wanted):
                continue
            for rule in RULES:
                for setup in setups:
                    # A proxy decides by the prices it is told: one run per price model.
                    for price in PRICE_MODELS if setup.policy else PRICE_MODELS[:1]:
                        told = price.name if setup.policy else None
                        print(
                            f"[bench] {transcript.name} / {rule.name} / {setup.name}"
                            f" / {told or 'any price'} ...",
                            file=sys.stderr,
                            flush=True,
                        )
                        provider.reset()
                        started = time.perf_counter()
                        conversation = f"{transcript.name}-{rule.name}".replace(" ", "-")
                        with target(
                            setup,
                            models,
                            route=rule.route,
                            conversation=conversation,
                            clock=clock,
                            price=price,
                        ) as where:
                            seen = replay(transcript, rule, where, provider.tokenizer)
                        runs.append(
                            Run(
                                transcript.name,
                                rule.name,
                                setup.name,
                                told,
                                provider.lines(),
                                seen,
                                time.perf_counter() - started,
                            )
                        )
    return runs


def _find(runs: list[Run], transcript: str, rule: str, setup: str, price: PriceModel) -> Run:
    """The run of this setup that was told ``price`` (a direct run stands for every price)."""
    return next(
        r
        for r in runs
        if (r.transcript, r.rule, r.setup) == (transcript, rule, setup)
        and r.price in (None, price.name)
    )


def report(runs: list[Run], window: int, setups: tuple[Setup, ...] = SETUPS) -> None:
    names = list(dict.fromkeys(r.transcript for r in runs))
    prices = " / ".join(p.name for p in PRICE_MODELS)
    print(f"\nCost as a ratio to sending direct (same run), priced {prices}:")
    print(f"{'rule':<10}{'setup':<19}" + "".join(f"{n:<22}" for n in names))
    for rule in RULES:
        for setup in setups:
            cells = []
            for name in names:
                ratios = [
                    _find(runs, name, rule.name, setup.name, p).cost(p)
                    / _find(runs, name, rule.name, SETUPS[0].name, p).cost(p)
                    for p in PRICE_MODELS
                ]
                cells.append(" ".join(f"{r:.2f}" for r in ratios) + "x")
            print(f"{rule.name:<10}{setup.name:<19}" + "".join(f"{c:<22}" for c in cells))
    print(f"\nDirect cost in dollars ({prices}):")
    for rule in RULES:
        cells = [
            " ".join(
                f"{_find(runs, n, rule.name, SETUPS[0].name, p).cost(p):.2f}" for p in PRICE_MODELS
            )
            for n in names
        ]
        print(f"{rule.name:<29}" + "".join(f"{c:<22}" for c in cells))

    print(
        f"\nPer run (window {window:,}; hit rate = cached / all prompt tokens, summarizer "
        "calls included; usage = what the client read equals what was billed):"
    )
    print(
        f"{'transcript':<18}{'rule':<10}{'setup':<30}{'turns':>6}{'summ.':>6}"
        f"{'summ. cost':>12}{'hit rate':>9}{'largest':>9}{'>window':>8}{'usage':>7}"
        f"{'secs':>6}  X-Compaction"
    )
    for run in runs:
        told = [p for p in PRICE_MODELS if p.name == run.price] or list(PRICE_MODELS)
        shares = [run.cost(p, run.summaries) / run.cost(p) for p in told]
        share = f"{min(shares):.1%}-{max(shares):.1%}" if run.summaries else "-"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(run.seen.outcomes.items()))
        label = f"{run.setup} @{run.price}" if run.price else run.setup
        print(
            f"{run.transcript:<18}{run.rule:<10}{label:<30}{len(run.turns):>6}"
            f"{len(run.summaries):>6}{share:>12}{run.hit_rate:>9.1%}{run.largest:>9,}"
            f"{'yes' if run.largest > window else 'no':>8}"
            f"{'ok' if run.usage_relayed else 'DIFF':>7}{run.seconds:>6.0f}  {outcomes}"
        )
    unclocked = sum(1 for run in runs for line in run.turns if not line.clocked)
    if unclocked:
        print(f"warning: {unclocked} turns reached the provider without X-Bench-Clock")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the length and window")
    parser.add_argument(
        "--setups",
        help="comma-separated setup names to run besides direct (default: all of SETUPS)",
    )
    parser.add_argument(
        "--mode",
        choices=("told", "users", "both"),
        default="told",
        help="told: the proxy told the bench's window and prices (the default); users: as users "
        "run it, real model names and the shipped configs untouched (as_users.py); both",
    )
    parser.add_argument(
        "--transcripts",
        help="comma-separated substrings: only the transcripts whose name holds one (the users "
        "mode also plays the public sessions under fixtures/)",
    )
    parser.add_argument(
        "--configs",
        help="users mode: comma-separated config names (default, coding-agent.yaml, long-chat.yaml)",
    )
    args = parser.parse_args(argv)
    wanted_transcripts = _chosen(args.transcripts)
    if args.mode in ("users", "both"):
        played = [
            t
            for t in [*transcripts(), *public_transcripts()]
            if wanted_transcripts is None or any(w in t.name for w in wanted_transcripts)
        ]
        names = _chosen(args.configs)
        configs = tuple(c for c in as_users.CONFIGS if names is None or c[0] in names)
        started = time.perf_counter()
        user_runs = as_users.bench(played, configs)
        as_users.report(user_runs, configs)
        print(f"\n{len(user_runs)} runs as users in {time.perf_counter() - started:.0f} s")
        if args.mode == "users":
            return 0
    setups = SETUPS
    if args.setups:
        wanted = {name.strip() for name in args.setups.split(",")}
        setups = tuple(s for s in SETUPS if s.policy is None or s.name in wanted)
    scale = 0.25 if args.quick else 1.0
    window = int(WINDOW * scale)
    started = time.perf_counter()
    runs = bench(scale, window, setups, wanted_transcripts)
    report(runs, window, setups)
    print(f"\n{len(runs)} runs in {time.perf_counter() - started:.0f} s")
    return 0 if all(run.usage_relayed for run in runs) else 1


def _chosen(option: str | None) -> list[str] | None:
    return None if not option else [part.strip() for part in option.split(",")]


if __name__ == "__main__":
    sys.exit(main())
