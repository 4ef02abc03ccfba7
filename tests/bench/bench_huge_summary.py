"""Benchmark of another client's latency while one conversation summarizes a huge old message:
a 24 MB user message in the first turn, summarized inline when the request that
carries it trips the trigger, while a second client asks /healthz and a small chat completion
(no conversation id: passed through) every 20 ms on keep-alive connections.

Run: .venv/bin/python -m tests.bench.bench_huge_summary [--mb 24] [--text prose|log]
[--source PATH] (about a minute). ``--source`` runs the proxy from another checkout, to compare (e.g. an export of the
commit before a change: ``git archive REV | tar -x -C /tmp/before``).

Printed: how long the huge request took, and the other client's latency while it ran (median,
p99, max, count) for /healthz and the small chat. Goal: p99 under 100 ms. The mock
provider answers every call at once (tests/bench/raw_upstream.py), so what is measured is the
proxy's own work. Everything listens on 127.0.0.1, every loop is bounded, and the servers
started here are stopped by their pid.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.bench import wire
from tests.bench.bench_long import MODEL, WORDS, start_proxy
from tests.bench.contenders import REPO, start_mock, wait_ready
from tests.support.config import EVERY_FOUR_INTERACTIONS

CHAT = "/v1/chat/completions"
KEY = "sk-bench-huge"
PROBE_EVERY = 0.02
# The proxy's configuration (start_proxy adds its port and the mock's URL).
HUGE = {
    "server": {
        "host": "127.0.0.1",
        "access_log": False,
        "log_level": "warning",
        "max_body_bytes": 67108864,
    },
    "upstream": {"timeouts": {"read": 600}},
    "store": {"url": "memory://", "tenant_secret": "bench-huge-tenant-secret-0123456789"},
    "summarizer": {"model": MODEL, "timeout_seconds": 600},
    "policies": {"default": EVERY_FOUR_INTERACTIONS},
}


def say(message: str) -> None:
    print(f"[bench-huge] {message}", file=sys.stderr, flush=True)


def huge_text(megabytes: float, kind: str) -> str:
    """``prose``: sentences of varied words, an identifier now and then; ``log``: a build log,
    numbers and paths on every line (what the identifier check looks for)."""
    lines, size, n = [], 0, 0
    target = int(megabytes * 1_000_000)
    while size < target:
        word = WORDS[n % len(WORDS)]
        if kind == "log":
            line = f"{n:07d} {word} value {n * 7919 % 100003} read from src/m{n % 97}/f{n % 13}.py"
        else:
            line = f"The {word} setting was {WORDS[n * 3 % len(WORDS)]} again before the step."
            if n % 50 == 0:
                line += f" See src/mod_{n % 97}.py."
        lines.append(line)
        size += len(line) + 1
        n += 1
    return "\n".join(lines)


def body_with(text: str) -> bytes:
    """Six interactions, the first holding ``text``: the trigger (4) fires, and the summary
    covers the first interactions, the huge one included."""
    messages = [{"role": "system", "content": "You are a careful assistant."}]
    messages.append({"role": "user", "content": text})
    for n in range(2, 7):
        messages += [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"turn {n}: " + "context " * 50},
        ]
    return json.dumps({"model": MODEL, "messages": messages}).encode()


def probe(
    port: int, request: bytes, until: threading.Event, out: list[float], waiting: list[float]
) -> None:
    """One request every PROBE_EVERY seconds on one keep-alive connection, until ``until``;
    ``waiting`` holds when the one in flight was sent (a proxy may never answer it)."""
    with wire.Connection(port, timeout=900) as conn:
        while not until.is_set():
            waiting[:] = [time.monotonic()]
            try:
                reply = conn.exchange(request)
            except OSError:  # the proxy was stopped while this one waited
                return
            waiting.clear()
            if reply.status != 200:
                raise SystemExit(f"probe answered {reply.status}")
            out.append(reply.elapsed * 1000)
            time.sleep(PROBE_EVERY)


def describe(name: str, samples: list[float]) -> str:
    if not samples:
        return f"{name}: no samples"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name}: median {statistics.median(ordered):.1f} ms, p99 {p99:.1f} ms, "
        f"max {ordered[-1]:.1f} ms over {len(ordered)} requests"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=24.0, help="size of the huge message (MB)")
    parser.add_argument("--text", choices=("prose", "log"), default="prose", help="its text")
    parser.add_argument("--source", type=Path, default=REPO, help="checkout to run the proxy from")
    parser.add_argument("--timeout", type=float, default=600, help="bound on the huge request")
    args = parser.parse_args(argv)
    say(f"building a {args.mb:g} MB message of {args.text}")
    body = body_with(huge_text(args.mb, args.text))
    with tempfile.TemporaryDirectory(prefix="bench-huge-") as tmp_name:
        tmp = Path(tmp_name)
        mock = start_mock(tmp, hang_seconds=1)
        proxy = start_proxy(tmp, mock.port, args.source.resolve(), sections=HUGE)
        try:
            wait_ready(mock, KEY)
            wait_ready(proxy, KEY)
            health = f"GET /healthz HTTP/1.1\r\nHost: {wire.HOST}:{proxy.port}\r\n\r\n".encode()
            small = json.dumps(
                {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            ).encode()
            chat = wire.post(proxy.port, CHAT, small, KEY)
            done = threading.Event()
            samples: dict[str, list[float]] = {"/healthz": [], "small chat": []}
            waiting: dict[str, list[float]] = {name: [] for name in samples}
            probes = [
                threading.Thread(
                    target=probe,
                    args=(proxy.port, request, done, samples[name], waiting[name]),
                    daemon=True,  # one the proxy never answers is left behind
                )
                for name, request in (("/healthz", health), ("small chat", chat))
            ]
            for thread in probes:
                thread.start()
            time.sleep(0.5)  # the probes' quiet baseline
            quiet = {name: len(s) for name, s in samples.items()}
            say(f"sending {len(body) / 1e6:.1f} MB with a conversation id")
            started = time.monotonic()
            try:
                response: httpx.Response | None = httpx.post(
                    f"http://127.0.0.1:{proxy.port}{CHAT}",
                    content=body,
                    headers={"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "bench-1"},
                    timeout=args.timeout,
                )
            except httpx.TimeoutException:
                response = None
            took = time.monotonic() - started
            done.set()
            for thread in probes:
                thread.join(timeout=5)
            for name, since in waiting.items():  # unanswered: counted as waiting until now
                samples[name].extend((time.monotonic() - t) * 1000 for t in since)
            try:
                metrics = httpx.get(f"http://127.0.0.1:{proxy.port}/metrics", timeout=30).text
            except httpx.TimeoutException:
                metrics = ""  # still busy with the huge request
        finally:
            proxy.server.stop()
            mock.server.stop()
    if response is None:
        print(f"huge request: no answer within {args.timeout:g} s")
    else:
        headers = response.headers
        print(f"huge request: {response.status_code}, X-Compaction {headers.get('x-compaction')}")
        print(
            f"  took {took:.2f} s (tokens {headers.get('x-compaction-tokens-before')} -> "
            f"{headers.get('x-compaction-tokens-after')})"
        )
    for line in metrics.splitlines():
        if line.startswith(("proxy_summarizer_calls_total", "proxy_summarizer_omitted")):
            print(f"  {line}")
    print("another client, while the huge request ran:")
    for name, values in samples.items():
        print(f"  {describe(name, values[quiet[name] :])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
