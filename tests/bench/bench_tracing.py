"""What OpenTelemetry tracing costs a request, measured in one run.

Run: .venv/bin/python -m tests.bench.bench_tracing [--quick] [--baseline-source CHECKOUT]

The same proxy twice in front of the benchmark's mock provider (tests/bench/raw_upstream.py),
one worker each: ``off`` (no ``OTEL_*`` in its environment: the default) and ``on`` (exporting
to a real OTLP/HTTP receiver started here, tests/ops/otlp_receiver.py); with
``--baseline-source`` also ``before``, a checkout of an older commit (e.g. ``git archive`` of
main), which shows what the tracing code costs while off. Two requests, each at concurrency 1
on a warm keep-alive connection, in interleaved rounds so that a busy machine weighs on every
contender alike: a pass-through chat completion (no conversation id: the request of
tests/bench/bench_proxy.py) and a compacted one (a conversation id, a memory store: one store
read, one plan, nothing summarized).

Printed: p50 and p99 per contender and request (the median over rounds), each proxy's added
p50 against the direct path, the CPU time its processes spent per request (steadier than
latency on a busy machine), and the two goals: tracing on adds at most 0.2 ms p50 per request
to ``off``; ``off`` is within noise of ``before`` (the spread of ``off`` across rounds is shown
beside it). Everything listens on 127.0.0.1; every server started here is stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

from tests.bench import wire
from tests.bench.contenders import Target, start_mock, start_ours, wait_ready
from tests.ops.otlp_receiver import OTLPReceiver
from tests.support.processes import machine_busy

CHAT = "/v1/chat/completions"
ON_BOUND_MS = 0.2  # the goal: added p50 per request with tracing on


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def request(port: int, key: str, *, conversation: str | None) -> bytes:
    """A small chat completion, naming ``conversation`` (then compacted) or not."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello there, how are you today?"},
    ]
    body = json.dumps({"model": "bench-small", "messages": messages}).encode()
    extra = f"X-Conversation-Id: {conversation}\r\n" if conversation else ""
    return (
        f"POST {CHAT} HTTP/1.1\r\nHost: {wire.HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def series(target: Target, raw: bytes, count: int) -> tuple[list[float], float]:
    """Milliseconds of ``count`` exchanges on one warm connection (after a warm-up), and the
    CPU seconds the target's processes used meanwhile (the exporter's thread included)."""
    times = []
    warmup = max(10, count // 10)
    with wire.Connection(target.port) as conn:
        for i in range(count + warmup):
            if i == warmup:
                cpu = target.server.cpu_seconds()
            reply = conn.exchange(raw)
            if reply.status != 200:
                raise RuntimeError(f"{target.name} answered {reply.status}")
            if i >= warmup:
                times.append(reply.elapsed * 1000)
    return times, target.server.cpu_seconds() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and requests")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7, quick 3)")
    parser.add_argument("--requests", type=int, help="requests per round (default 400, quick 150)")
    parser.add_argument("--baseline-source", type=Path, help="an older checkout, as before[...]")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    count = args.requests or (150 if args.quick else 400)
    key = "sk-bench-" + secrets.token_hex(16)
    tmp = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    busy = machine_busy()
    targets: list[Target] = []
    with OTLPReceiver() as receiver:
        try:
            mock = start_mock(tmp, hang_seconds=5)
            targets.append(mock)
            wait_ready(mock, key)
            traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}  # the SDK's batching defaults
            proxies = [
                start_ours(tmp, "aiohttp", mock.port, 1, label="off"),
                start_ours(tmp, "aiohttp", mock.port, 1, label="on", env=traced),
            ]
            if args.baseline_source is not None:
                source = args.baseline_source.resolve()
                proxies.append(
                    start_ours(tmp, "aiohttp", mock.port, 1, source=source, label="before")
                )
            targets += proxies
            for target in proxies:
                wait_ready(target, key)
            results = measure([mock, *proxies], key, rounds=rounds, count=count)
        finally:
            for target in reversed(targets):
                target.server.stop()
        spans = len(receiver.spans)
    print("\n".join(report(results, spans=spans, busy=busy, rounds=rounds, count=count)))
    return 0


# request -> target -> per round (p50 ms, p99 ms, CPU ms per request)
Results = dict[str, dict[str, list[tuple[float, float, float]]]]


def measure(targets: list[Target], key: str, *, rounds: int, count: int) -> Results:
    results: Results = {"pass-through": {}, "compacted": {}}
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}")
        shift = r % len(targets)
        for target in targets[shift:] + targets[:shift]:
            for name, conversation in (("pass-through", None), ("compacted", f"bench-{r}")):
                if target.name == "direct" and conversation:
                    continue  # the mock does not care; one direct series is enough
                raw = request(target.port, key, conversation=conversation)
                times, cpu = series(target, raw, count)
                p50, p99 = wire.percentile(times, 50), wire.percentile(times, 99)
                results[name].setdefault(target.name, []).append((p50, p99, cpu * 1000 / count))
    return results


def report(results: Results, *, spans: int, busy: float, rounds: int, count: int) -> list[str]:
    lines = [
        f"tracing cost, {rounds} rounds x {count} requests at c=1, 1 worker; "
        f"{platform.processor() or platform.machine()}, {_cpus()} CPUs, others used "
        f"{busy:.0%} of them before the run",
        f"spans the receiver got from on[aiohttp]: {spans}",
        "",
        f"{'request':<13} {'target':<17} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} "
        f"{'p50 spread':>11} {'CPU ms/req':>11}",
    ]
    direct = statistics.median(v[0] for v in results["pass-through"].get("direct", [(0, 0, 0)]))
    for name, per in results.items():
        for target, values in per.items():
            p50 = statistics.median(v[0] for v in values)
            p99 = statistics.median(v[1] for v in values)
            spread = max(v[0] for v in values) - min(v[0] for v in values)
            added = "" if target == "direct" else f"{p50 - direct:+.3f}"
            lines.append(
                f"{name:<13} {target:<17} {p50:8.3f} {p99:8.3f} {added:>10} {spread:11.3f} "
                f"{_cpu(per, target):11.3f}"
            )
    lines.append("")
    for name, per in results.items():
        off, on = _p50(per, "off[aiohttp]"), _p50(per, "on[aiohttp]")
        if off is not None and on is not None:
            ok = "ok" if on - off <= ON_BOUND_MS else "MISSED"
            cpu = _cpu(per, "on[aiohttp]") - _cpu(per, "off[aiohttp]")
            lines.append(
                f"goal {name}: tracing on adds {on - off:+.3f} ms p50 to off "
                f"(x{on / off:.3f}; bound {ON_BOUND_MS} ms): {ok}; CPU {cpu:+.3f} ms a request"
            )
        before = _p50(per, "before[aiohttp]")
        if off is not None and before is not None:
            spread = max(v[0] for v in per["off[aiohttp]"]) - min(v[0] for v in per["off[aiohttp]"])
            verdict = "within noise" if abs(off - before) <= spread else "outside the spread"
            lines.append(
                f"goal {name}: tracing off vs before: {off - before:+.3f} ms p50 "
                f"(x{off / before:.3f}; off's own spread across rounds {spread:.3f} ms): {verdict}"
            )
    return lines


def _p50(per: dict[str, list[tuple[float, float, float]]], target: str) -> float | None:
    values = per.get(target)
    return statistics.median(v[0] for v in values) if values else None


def _cpu(per: dict[str, list[tuple[float, float, float]]], target: str) -> float:
    """CPU ms per request over every round (steadier than latency on a busy machine; the
    tick is 10 ms, so one round alone is coarse)."""
    values = per.get(target, [])
    return statistics.fmean(v[2] for v in values) if values else 0.0


def _cpus() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
