"""Added latency per turn of ahead-of-time vs inline summaries ("Measure it").

Run: .venv/bin/python -m tests.bench.bench_ahead [--turns 60] [--think 0.5] (about 2 minutes a store).

One process, real servers on free loopback ports: a mock provider (tests/support/provider.py) whose
chat answers are immediate and whose summarizer calls take 2 s, one proxy in front of it with two
policies that differ only in ``mode`` (``ahead`` and ``inline``; summarize, trigger 6 interactions,
keep 2), and the official openai client. The same scripted conversation is played four times, a
new conversation id each: straight to the mock (the baseline), through the proxy with
``X-Compaction: off``, with the ``ahead`` policy and with the ``inline`` one, pausing a think time
between turns as a person or an agent's tool would. Added latency of a turn = its latency minus
the median baseline latency. Run for memory:// and, when a redis-server binary exists, for a
private redis-server on a free port (stopped by its pid).

The goal (PASS/FAIL): ``ahead`` adds no more than a store read at any turn, taken as: its worst
turn is within SLACK_MS of the worst turn of the same proxy with compaction off, and far below the
2 s a summary takes (inline, in contrast, must show the summaries on the request path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken"))

import httpx  # noqa: E402
import openai  # noqa: E402

from proxy.app import create_app  # noqa: E402
from proxy.config.settings import Settings  # noqa: E402
from tests.support.config import EVERY_SIX_INTERACTIONS, config  # noqa: E402
from tests.support.mock_upstream import MockUpstream  # noqa: E402
from tests.support.provider import SUMMARIZER_MODEL, SYSTEM, Provider  # noqa: E402
from tests.support.redis_server import RedisServer, redis_available  # noqa: E402
from tests.support.servers import ThreadedUvicorn  # noqa: E402

SUMMARY_SECONDS = 2.0
SLACK_MS = 10.0  # "within a few ms" of the same proxy with compaction off
WARMUP_TURNS = 4
RUNS = ("baseline", "off", "ahead", "inline")


def ahead_config(provider: str, store_url: str) -> Settings:
    """A summary every six interactions: ahead of time (``default``, ``ahead``) or inline."""
    ahead = {**EVERY_SIX_INTERACTIONS, "mode": "ahead"}
    return config(
        provider=provider,
        store={"url": store_url, "tenant_secret": "bench-ahead-tenant-secret-0123456789"},
        summarizer={"model": SUMMARIZER_MODEL, "timeout_seconds": 10},
        policies={"default": ahead, "ahead": ahead, "inline": EVERY_SIX_INTERACTIONS},
    )


def user_text(turn: int) -> str:
    """A scripted user turn of a few hundred characters (a coding session)."""
    words = " ".join(f"detail{(turn * 37 + i) % 101}" for i in range(40))
    return f"Step {turn}: change src/module_{turn % 7}.py so that test_{turn} passes. {words}"


@dataclass
class Run:
    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, one per turn
    outcomes: Counter = field(default_factory=Counter)  # X-Compaction header values
    summaries: int = 0  # summarizer calls the provider answered for this run

    def added_ms(self, baseline: float) -> list[float]:
        return [(t - baseline) * 1000 for t in self.latencies]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def play(client: openai.OpenAI, run: Run, turns: int, think: float, headers: dict) -> None:
    """The scripted conversation, one request per turn, ``think`` seconds between turns."""
    history = [SYSTEM]
    for turn in range(turns):
        history.append({"role": "user", "content": user_text(turn)})
        started = time.perf_counter()
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history, extra_headers=headers
        )
        run.latencies.append(time.perf_counter() - started)
        run.outcomes[raw.headers.get("x-compaction", "-")] += 1
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
        time.sleep(think)


def settle(provider: Provider, proxy: ThreadedUvicorn) -> None:
    """Wait (bounded) until no background summary is queued or running."""
    deadline = time.monotonic() + 4 * SUMMARY_SECONDS + 5
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{proxy.url}/metrics").text
        depth = [line for line in metrics.splitlines() if line.startswith("proxy_background_queue")]
        if depth and all(line.endswith(" 0.0") for line in depth):
            return
        time.sleep(0.1)
    print("warning: background summaries still running", file=sys.stderr)


def bench(store_url: str, label: str, turns: int, think: float) -> dict[str, Run]:
    mock = MockUpstream()
    provider = Provider(mock)
    provider.summary_delay = SUMMARY_SECONDS
    runs = {name: Run(name) for name in RUNS}
    with ThreadedUvicorn(mock) as upstream:
        settings = ahead_config(upstream.url, store_url)
        app = create_app(settings)
        with ThreadedUvicorn(app, server_header=False, date_header=False) as proxy:
            targets = {"baseline": upstream.url, "off": proxy.url, "ahead": proxy.url,
                       "inline": proxy.url}  # fmt: skip
            headers = {"baseline": {}, "off": {"X-Compaction": "off"},
                       "ahead": {"X-Compaction-Policy": "ahead"},
                       "inline": {"X-Compaction-Policy": "inline"}}  # fmt: skip
            for name in RUNS:
                client = openai.OpenAI(
                    base_url=f"{targets[name]}/v1",
                    api_key="sk-bench-caller",
                    max_retries=0,
                    timeout=30,
                )
                # Warm up connections, tokenizer and code paths (summaries stay unreached).
                play(client, Run("warmup"), WARMUP_TURNS, 0.0,
                     {**headers[name], "X-Conversation-Id": f"warmup-{name}"})  # fmt: skip
                before = provider.summaries
                print(f"[bench] {label}: {name} ({turns} turns)...", file=sys.stderr, flush=True)
                play(client, runs[name], turns, think,
                     {**headers[name], "X-Conversation-Id": f"bench-{name}"})  # fmt: skip
                settle(provider, proxy)
                runs[name].summaries = provider.summaries - before
                client.close()
    return runs


def report(label: str, runs: dict[str, Run], think: float) -> bool:
    baseline = statistics.median(runs["baseline"].latencies)
    print(f"\nstore {label}: median baseline turn (client -> mock, no proxy) "
          f"{baseline * 1000:.2f} ms; think time {think:.2f} s; summary call {SUMMARY_SECONDS:.1f} s")  # fmt: skip
    print(f"{'run':<9}{'turns':>6}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
          f"{'summaries':>11}  X-Compaction")  # fmt: skip
    stats = {}
    for name in RUNS[1:]:
        added = runs[name].added_ms(baseline)
        stats[name] = (percentile(added, 50), percentile(added, 99), max(added))
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(runs[name].outcomes.items()))
        p50, p99, worst = stats[name]
        print(f"{name:<9}{len(added):>6}{p50:>10.2f}{p99:>10.2f}{worst:>10.2f}"
              f"{runs[name].summaries:>11}  {outcomes}")  # fmt: skip
    bound = stats["off"][2] + SLACK_MS
    ahead_ok = stats["ahead"][2] <= bound and runs["ahead"].summaries > 0
    ahead_ok = ahead_ok and runs["ahead"].outcomes["applied"] > 0
    inline_seen = stats["inline"][2] >= SUMMARY_SECONDS * 1000 * 0.9
    verdict = "PASS" if ahead_ok and inline_seen else "FAIL"
    print(f"{verdict} ({label}): ahead's worst turn adds {stats['ahead'][2]:.2f} ms, bound "
          f"{bound:.2f} ms (off's worst {stats['off'][2]:.2f} + {SLACK_MS:.0f}); "
          f"{runs['ahead'].summaries} summaries made in the background, "
          f"{runs['ahead'].outcomes['applied']} turns compacted; inline's worst turn "
          f"{stats['inline'][2]:.0f} ms (a summary on the request path)")  # fmt: skip
    return verdict == "PASS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--think", type=float, default=0.5, help="seconds between turns")
    args = parser.parse_args()
    stores = [("memory://", "memory://")]
    redis_server = None
    if redis_available():
        redis_server = RedisServer().start()
        stores.append((redis_server.url, f"redis (private, port {redis_server.port})"))
    else:
        print("[bench] no redis-server binary: memory:// only", file=sys.stderr)
    ok = True
    try:
        for url, label in stores:
            ok = report(label, bench(url, label, args.turns, args.think), args.think) and ok
    finally:
        if redis_server is not None:
            redis_server.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
