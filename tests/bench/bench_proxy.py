"""Benchmark of the pass-through proxy: the same work four ways, in one run.

Run: .venv/bin/python -m tests.bench.bench_proxy [--quick] (``make bench``; about 7 minutes,
about 3 with --quick, plus installs on the first run).

- direct: the client talks to the mock provider (tests/bench/raw_upstream.py), whose ceiling is
  printed: it must never be the bottleneck;
- nginx: Debian's nginx as a plain reverse proxy (the floor for a proxy hop);
- litellm: the LiteLLM proxy from PyPI, in its own virtualenv under .bench/, a pass-through to
  the same mock (one ``openai/<model>`` entry per scenario), same worker count;
- ours: ``python -m proxy serve`` with each upstream candidate (aiohttp, httpx, and httpx over
  httpx-aiohttp's transport, which is installed under .bench/ for this purpose only).

Everything listens on 127.0.0.1 only, every loop is bounded, and every server started here is
stopped by its pid, also on errors and Ctrl-C. A contender that cannot be installed or started
is reported with the reason and the rest goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from proxy.config.settings import UpstreamSettings
from tests.bench import contenders, load, wire
from tests.bench.contenders import CANDIDATES, REPO, Target, Unavailable, chat_body
from tests.support.processes import OthersShare, Server, machine_busy

CHAT = "/v1/chat/completions"
WINDOWS = {
    "before headers": "bench-hang-headers",
    "before 1st chunk": "bench-hang-first",
    "mid-stream": "bench-hang-mid",
}
DISCONNECT_BOUND = 1.0  # seconds: later than this counts as not propagated
HELD_BACK_MS = 5.0
P99_BOUND_MS = 50.0
DEFAULT = UpstreamSettings().transport  # the candidate users get; the goals are checked on it


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def big_body() -> bytes:
    """A ~400 KB chat request: a 100k-token conversation (about 4 characters a token)."""
    messages = [{"role": "system", "content": "You are a helpful coding assistant."}]
    turn = 0
    while sum(len(m["content"]) for m in messages) < 400_000:
        text = " ".join(f"word{(turn * 131 + i) % 9973}" for i in range(400))
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Turn {turn}: {text}"})
        turn += 1
    return json.dumps({"model": "bench-small", "messages": messages}).encode()


@dataclass
class Row:
    """Everything measured for one contender."""

    name: str
    small: tuple[float, float] | None = None  # c=1 latency (p50, p99) in ms, median of rounds
    big: tuple[float, float] | None = None
    ttfb: float | None = None  # ms to the first SSE event, median of rounds
    chunk1: list[float] = field(default_factory=list)  # ms to chunk 1 of the gap stream
    chunk_gap: list[float] = field(default_factory=list)  # ms between chunk 1 and chunk 2
    disconnect: dict[str, DisconnectResult] = field(default_factory=dict)
    one_worker: load.Load | None = None
    two_workers: list[load.Load] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def best_under_bound(self) -> load.Load | None:
        fits = [p for p in self.two_workers if p.p99_ms <= P99_BOUND_MS and not p.errors]
        return max(fits, key=lambda p: p.rps, default=None)


@dataclass
class DisconnectResult:
    delays: list[float] = field(default_factory=list)  # ms from the client's close to upstream's
    missed: int = 0  # not closed within the bound
    window_missed: int = 0  # the client never reached the window (e.g. no headers before chunk 1)
    gave_up: bool = False

    @property
    def trials(self) -> int:
        return len(self.delays) + self.missed


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
        self.tmp.chmod(0o755)
        self.key = "sk-bench-" + secrets.token_hex(24)  # LiteLLM refuses to start without one
        self.servers: list[Server] = []
        self.rows: dict[str, Row] = {}
        self.notes: list[str] = []
        self.versions: dict[str, str] = {}
        self.mock: Target | None = None
        self.mock_ceiling: list[load.Load] = []
        self.mock_cpu_share: list[float] = []  # of one core, during each proxied wrk run
        self.profile_lines: list[str] = []
        self.busy_before: float | None = None  # share of the CPUs others used before the run
        self.others: OthersShare | None = None
        self.others_during: float | None = None  # share of the CPUs others used during it
        self.wrk: str | None = None
        self.nginx: str | None = None
        self.litellm: Path | None = None
        self.py_spy: Path | None = None
        self.candidates = [c for c in args.candidates.split(",") if c]
        self.small = chat_body("bench-small")
        self.big = big_body()

    # ---- set-up -------------------------------------------------------------------------

    def note(self, message: str) -> None:
        self.notes.append(message)
        say(message)

    def install(self) -> None:
        try:
            self.wrk = contenders.ensure_debian("wrk", "wrk", say)
            self.versions["wrk"] = contenders.version_of([self.wrk, "-v"])
        except Unavailable as exc:
            self.note(f"wrk unavailable, no throughput figures: {exc}")
        if not self.args.skip_nginx:
            try:
                self.nginx = contenders.ensure_debian("nginx", "nginx", say)
                self.versions["nginx"] = contenders.version_of([self.nginx, "-v"])
            except Unavailable as exc:
                self.note(f"nginx unavailable: {exc}")
        if not self.args.skip_litellm:
            try:
                self.litellm = contenders.ensure_litellm(say)
                python = str(contenders.LITELLM_VENV / "bin" / "python")
                version = "import importlib.metadata as m; print(m.version('litellm'))"
                self.versions["litellm"] = contenders.version_of([python, "-c", version])
            except Unavailable as exc:
                self.note(f"LiteLLM unavailable: {exc}")
        if "httpx-aiohttp" in self.candidates:
            try:
                contenders.ensure_pip_target(
                    "httpx-aiohttp",
                    contenders.EXTRA_DIR,
                    contenders.EXTRA_DIR / "httpx_aiohttp",
                    say,
                )
            except Unavailable as exc:
                self.note(f"httpx-aiohttp unavailable, candidate dropped: {exc}")
                self.candidates.remove("httpx-aiohttp")
        if self.args.profile_seconds > 0:
            py_spy = contenders.TOOLS_DIR / "bin" / "py-spy"
            try:
                contenders.ensure_pip_target("py-spy", contenders.TOOLS_DIR, py_spy, say)
                self.py_spy = py_spy
            except Unavailable as exc:
                self.note(f"py-spy unavailable, no profile: {exc}")

    def track(self, target: Target) -> Target:
        self.servers.append(target.server)
        return target

    def start_proxies(self, workers: int) -> list[Target]:
        """Start every proxy with ``workers`` workers, at once; return those that came up."""
        assert self.mock is not None
        mock_port = self.mock.port
        starters: list[tuple[str, Callable[[], Target]]] = []
        if self.nginx:
            nginx = self.nginx
            starters.append(
                ("nginx", lambda: contenders.start_nginx(self.tmp, nginx, mock_port, workers))
            )
        if self.litellm:
            litellm = self.litellm
            starters.append(
                (
                    "litellm",
                    lambda: contenders.start_litellm(
                        self.tmp, litellm, mock_port, workers, self.key
                    ),
                )
            )
        for candidate in self.candidates:
            starters.append(
                (
                    f"ours[{candidate}]",
                    lambda c=candidate: contenders.start_ours(
                        self.tmp, c, mock_port, workers, source=self.args.ours_source
                    ),
                )
            )
        if self.args.baseline_source is not None:
            for candidate in self.candidates:
                starters.append(
                    (
                        f"before[{candidate}]",
                        lambda c=candidate: contenders.start_ours(
                            self.tmp,
                            c,
                            mock_port,
                            workers,
                            source=self.args.baseline_source,
                            label="before",
                        ),
                    )
                )
        started = []
        for name, start in starters:
            try:
                started.append(self.track(start()))
            except OSError as exc:
                self.note(f"{name} could not start: {exc}")
        ready = []
        for target in started:
            try:
                contenders.wait_ready(target, self.key)
            except Unavailable as exc:
                self.note(f"{target.name} ({workers} worker(s)) left out: {exc}")
                continue
            if target.name == "nginx" and not contenders.nginx_pid_matches(target):
                self.note("nginx's pid file does not name the process started; stopping it")
                target.server.stop()
                continue
            ready.append(target)
        return ready

    def stop(self, targets: list[Target]) -> None:
        for target in targets:
            target.server.stop()
            if target.server in self.servers:
                self.servers.remove(target.server)

    def row(self, name: str) -> Row:
        return self.rows.setdefault(name, Row(name))

    # ---- measurements ---------------------------------------------------------------------

    def _interleaved(
        self, targets: list[Target], measure: Callable[[Target], float | tuple[float, float]]
    ) -> dict[str, list]:
        """``measure`` each target once a round, the order rotating; a target that fails is
        reported and left out of the later rounds."""
        per: dict[str, list] = {t.name: [] for t in targets}
        failed: set[str] = set()
        for r in range(self.args.rounds):
            shift = r % len(targets)
            for target in targets[shift:] + targets[:shift]:
                if target.name in failed:
                    continue
                try:
                    per[target.name].append(measure(target))
                except (OSError, RuntimeError) as exc:
                    self.row(target.name).problems.append(f"round {r + 1}: {exc}")
                    failed.add(target.name)
        return {name: values for name, values in per.items() if values and name not in failed}

    def _series(self, target: Target, request: bytes, count: int) -> list:
        """``count`` exchanges on one warm keep-alive connection."""
        warmup = max(5, count // 10)
        replies = []
        with wire.Connection(target.port) as conn:
            for i in range(warmup + count):
                reply = conn.exchange(request)
                if reply.status != 200:
                    raise RuntimeError(f"answered {reply.status}")
                if i >= warmup:
                    replies.append(reply)
        return replies

    def latency(self, targets: list[Target], body: bytes, requests: int) -> dict[str, tuple]:
        """c=1: per target the median over rounds of each round's p50 and p99, in ms."""

        def measure(target: Target) -> tuple[float, float]:
            request = wire.post(target.port, CHAT, body, self.key)
            times = [r.elapsed * 1000 for r in self._series(target, request, requests)]
            return wire.percentile(times, 50), wire.percentile(times, 99)

        return {
            name: (statistics.median(p[0] for p in per), statistics.median(p[1] for p in per))
            for name, per in self._interleaved(targets, measure).items()
        }

    def streams(self, targets: list[Target]) -> None:
        """Time to the first SSE event (interleaved rounds), then the held-back check."""
        stream = chat_body("bench-stream", stream=True)

        def measure(target: Target) -> float:
            request = wire.post(target.port, CHAT, stream, self.key)
            replies = self._series(target, request, self.args.stream_requests)
            if not all(r.marks for r in replies):
                raise RuntimeError("a stream without SSE events")
            return wire.percentile([r.marks[0] * 1000 for r in replies], 50)

        for name, per in self._interleaved(targets, measure).items():
            self.row(name).ttfb = statistics.median(per)
        gap = chat_body("bench-gap", stream=True)
        conns = {t.name: wire.Connection(t.port) for t in targets}
        try:
            for target in targets:  # one stream first: the connection is warm
                conns[target.name].exchange(wire.post(target.port, CHAT, stream, self.key))
            for _ in range(self.args.gap_trials):
                for target in targets:
                    request = wire.post(target.port, CHAT, gap, self.key)
                    reply = conns[target.name].exchange(request)
                    row = self.row(target.name)
                    if reply.status != 200 or len(reply.marks) < 2:
                        row.problems.append(f"gap stream: status {reply.status}, {reply.marks}")
                        continue
                    row.chunk1.append(reply.marks[0] * 1000)
                    row.chunk_gap.append((reply.marks[1] - reply.marks[0]) * 1000)
        finally:
            for conn in conns.values():
                conn.close()

    def disconnects(self, targets: list[Target]) -> None:
        """Per window: the client closes; how long until the mock sees its connection close."""
        assert self.mock is not None
        mock = self.mock.port
        for window, model in WINDOWS.items():
            for target in targets:
                result = self.row(target.name).disconnect.setdefault(window, DisconnectResult())
                in_a_row = 0
                for _ in range(self.args.disconnect_trials):
                    token = secrets.token_hex(8)
                    body = chat_body(model, token, stream=True)
                    conn = wire.Connection(target.port)
                    try:
                        conn.send(wire.post(target.port, CHAT, body, self.key))
                        reached = wire.wait_event(mock, token, "received", 5.0) is not None
                        if window == "before 1st chunk":
                            reached = reached and conn.wait_headers(3.0)
                        elif window == "mid-stream":
                            reached = reached and conn.wait_events(1, 3.0)
                    except OSError:
                        reached = False
                    closed_at = time.monotonic()
                    conn.close()
                    seen = wire.wait_event(mock, token, "closed", DISCONNECT_BOUND + 1.0)
                    result.window_missed += not reached
                    if seen is not None and seen - closed_at <= DISCONNECT_BOUND:
                        result.delays.append(max(0.0, seen - closed_at) * 1000)
                        in_a_row = 0
                    else:
                        result.missed += 1
                        in_a_row += 1
                        if in_a_row >= 3:  # it does not propagate; more trials only cost time
                            result.gave_up = True
                            break

    def throughput_one_worker(self, targets: list[Target], script: Path) -> None:
        assert self.wrk is not None and self.mock is not None
        seconds = self.args.duration
        for target in targets:
            watch = [target.server] if target is self.mock else [target.server, self.mock.server]
            load.run_wrk(
                self.wrk, target.port, script, connections=16, seconds=1, watch=[]
            )  # warm-up
            result = load.run_wrk(
                self.wrk, target.port, script, connections=16, seconds=seconds, watch=watch
            )
            self.row(target.name).one_worker = result
            if target is self.mock:
                self.mock_ceiling.append(result)
            else:
                self.mock_cpu_share.append(result.cpu["mock"] / result.seconds)
            say(
                f"  {target.name}: {result.rps:,.0f} req/s at 16 connections, "
                f"p99 {result.p99_ms:.1f} ms, errors {result.errors}"
            )
        self.mock_ceiling.append(
            load.run_wrk(
                self.wrk,
                self.mock.port,
                script,
                connections=64,
                seconds=seconds,
                watch=[self.mock.server],
            )
        )

    def sweep(self, target: Target, script: Path) -> None:
        """Connections rise until p99 passes the bound: the best rate within it counts."""
        assert self.wrk is not None
        row = self.row(target.name)
        row.two_workers = []
        load.run_wrk(self.wrk, target.port, script, connections=8, seconds=1, watch=[])
        over = 0
        for connections in self.args.sweep_connections:
            result = load.run_wrk(
                self.wrk,
                target.port,
                script,
                connections=connections,
                seconds=self.args.sweep_duration,
                watch=[target.server],
            )
            row.two_workers.append(result)
            say(
                f"    {connections} conns: {result.rps:,.0f} req/s, p99 {result.p99_ms:.1f} ms"
                + (f", {result.errors} errors" if result.errors else "")
            )
            over = over + 1 if result.p99_ms > P99_BOUND_MS or result.errors else 0
            if over == 2:  # twice in a row over the bound: more connections will not help
                break
        best = row.best_under_bound()
        say(
            f"  {target.name}: "
            + (f"{best.rps:,.0f} req/s at {best.connections} conns" if best else "none in bound")
        )

    def profile(self, target: Target, script: Path) -> None:
        assert self.py_spy is not None and self.wrk is not None
        raw = self.tmp / "profile.txt"
        seconds = self.args.profile_seconds
        pid = target.server.workers()[0]
        spy = load.profile(self.py_spy, pid, seconds, raw)
        load.run_wrk(self.wrk, target.port, script, connections=16, seconds=seconds - 1, watch=[])
        try:
            _, err = spy.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            spy.kill()
            _, err = spy.communicate()
        if not raw.exists():
            self.note(f"py-spy wrote no profile: {err.decode(errors='replace')[-300:]}")
            return
        self.profile_lines = [
            f"{target.name}, 1 worker, wrk 16 connections, {seconds:.0f} s at 200 Hz:",
            *load.summarize_profile(raw),
        ]
        if self.args.keep_profile:
            kept = contenders.BENCH_DIR / "profile-ours.txt"
            shutil.copy(raw, kept)
            self.profile_lines.append(f"collapsed stacks kept in {kept.relative_to(REPO)}")

    # ---- the run --------------------------------------------------------------------------

    def run(self) -> None:
        self.install()
        self.busy_before = machine_busy()
        if self.busy_before > 0.10:
            self.note(
                f"the machine was {100 * self.busy_before:.0f}% busy before the run (other "
                "work): figures will be noisy; run again when it is idle"
            )
        self.others = OthersShare()
        self.mock = self.track(contenders.start_mock(self.tmp, hang_seconds=5.0))
        contenders.wait_ready(self.mock, self.key, timeout=20)
        say("phase 1: one worker each")
        proxies = self.start_proxies(workers=1)
        targets = [self.mock, *proxies]
        names = ", ".join(t.name for t in targets)
        say(f"latency at c=1 ({self.args.rounds} rounds): {names}")
        for name, figures in self.latency(targets, self.small, self.args.small_requests).items():
            self.row(name).small = figures
        for name, figures in self.latency(targets, self.big, self.args.big_requests).items():
            self.row(name).big = figures
        say("streaming: time to first chunk, and the 500 ms gap")
        self.streams(targets)
        say("client disconnects")
        # LiteLLM last: if it leaves upstream requests hanging they must not disturb the others.
        self.disconnects(sorted(targets, key=lambda t: t.name == "litellm"))
        if self.wrk:
            script = load.wrk_script(self.tmp, self.small, self.key)
            say(f"throughput, one worker, 16 connections, {self.args.duration:.0f} s each")
            self.throughput_one_worker(targets, script)
            ours = next((t for t in proxies if t.name == f"ours[{DEFAULT}]"), None)
            if self.py_spy and ours is not None:
                say(f"profiling {ours.name} with py-spy")
                self.profile(ours, script)
        self.stop(proxies)
        if self.wrk and self.args.sweep_duration > 0:
            say("phase 2: two workers each; throughput at p99 <= 50 ms")
            self.sweep(self.mock, script)
            proxies = self.start_proxies(workers=2)
            for target in proxies:
                self.sweep(target, script)
            self.stop(proxies)

    def close(self) -> None:
        for server in reversed(self.servers):
            try:
                server.stop()
            except OSError as exc:
                say(f"stopping {server.name} (pid {server.pid}): {exc}")
        self.servers.clear()
        if self.others is not None:
            self.others_during = self.others.stop()
            if self.others_during > 0.05:
                self.note(
                    f"other processes used {100 * self.others_during:.0f}% of the CPUs during the "
                    "run: figures are disturbed; run again when the machine is idle"
                )
        if not self.args.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            say(f"logs and configs kept in {self.tmp}")


# ---- the report -----------------------------------------------------------------------------


def _ms(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if sign else f"{value:.2f}"


def _pct(part: float | None, whole: float | None) -> str:
    if not part or not whole:
        return "-"
    return f"{100 * part / whole:.0f}%"


def report(bench: Bench) -> list[str]:
    rows = list(bench.rows.values())
    direct = bench.rows.get("direct")
    nginx = bench.rows.get("nginx")
    lines: list[str] = []
    versions = ", ".join(f"{k} {v}" for k, v in bench.versions.items())
    lines.append(
        f"Proxy benchmark: {os.cpu_count()} CPUs, Python {platform.python_version()}, {versions}; "
        f"ours from {bench.args.ours_source}"
        + (
            f"; CPUs {100 * bench.busy_before:.0f}% busy before the run"
            if bench.busy_before is not None
            else ""
        )
        + (
            f", {100 * bench.others_during:.0f}% used by others during it"
            if bench.others_during is not None
            else ""
        )
    )
    if bench.mock_ceiling:
        ceiling = ", ".join(f"{c.rps:,.0f} req/s at {c.connections}" for c in bench.mock_ceiling)
        busiest = max(bench.mock_cpu_share, default=0.0)
        lines.append(
            f"mock upstream ceiling (direct, wrk -t1 on the same 2 cores): {ceiling} connections; "
            f"during the proxied runs the mock used at most {100 * busiest:.0f}% of one core"
        )
    a = bench.args
    lines += [
        "",
        f"Latency at c=1, ms: median over {a.rounds} interleaved rounds of each round's p50/p99 "
        f"({a.small_requests} small / {a.big_requests} 400 KB requests a round); "
        "proxies: added to direct",
        f"{'':22}{'small p50':>11}{'small p99':>11}{'400KB p50':>11}{'400KB p99':>11}",
    ]
    for row in rows:
        base = direct if row is not direct else None
        cells = []
        for figures, ref in ((row.small, base and base.small), (row.big, base and base.big)):
            for i in range(2):
                if figures is None:
                    cells.append("-")
                elif ref:
                    cells.append(_ms(figures[i] - ref[i], sign=True))
                else:
                    cells.append(_ms(figures[i]))
        label = "direct (absolute)" if row is direct else row.name
        lines.append(f"{label:22}" + "".join(f"{c:>11}" for c in cells))

    lines += [
        "",
        f"Throughput, small body, wrk -t1: one worker at 16 connections ({a.duration:.0f} s); "
        f"two workers: best rate with p99 <= {P99_BOUND_MS:.0f} ms "
        f"(connections {','.join(map(str, a.sweep_connections))}, {a.sweep_duration:.0f} s each)",
        f"{'':22}{'req/s':>9}{'p99 ms':>8}{'of direct':>10}{'of nginx':>9}{'CPU ms/req':>11}"
        f"{'2w req/s':>10}{'conns':>6}{'p99 ms':>8}",
    ]
    for row in rows:
        one = row.one_worker
        cells = ["-"] * 5
        if one is not None:
            name = "mock" if row is direct else row.name
            cells = [
                f"{one.rps:,.0f}" + ("!" if one.errors else ""),
                f"{one.p99_ms:.1f}",
                _pct(one.rps, direct and direct.one_worker and direct.one_worker.rps),
                _pct(one.rps, nginx and nginx.one_worker and nginx.one_worker.rps),
                f"{one.cpu_ms_per_request(name):.3f}",
            ]
        best = row.best_under_bound()
        if best is not None:
            cells += [f"{best.rps:,.0f}", str(best.connections), f"{best.p99_ms:.1f}"]
        elif row.two_workers:
            cells += ["none", "-", f"{row.two_workers[0].p99_ms:.1f}"]
        else:
            cells += ["-", "-", "-"]
        label = "direct (mock, 1 proc)" if row is direct else row.name
        widths = (9, 8, 10, 9, 11, 10, 6, 8)
        lines.append(
            f"{label:22}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
        )

    lines += [
        "",
        f"Streaming, ms: first SSE event (median of rounds; proxies: added); gap stream "
        f"({a.gap_trials} trials): chunk 1 vs direct's median (median / worst), "
        "chunk 1 -> chunk 2",
        f"{'':22}{'1st event':>10}{'chunk 1 +':>18}{'1 -> 2':>9}  chunk 1 held back?",
    ]
    direct_chunk1 = statistics.median(direct.chunk1) if direct and direct.chunk1 else None
    for row in rows:
        first = row.ttfb
        if row is not direct and direct and direct.ttfb is not None and first is not None:
            first_text = _ms(first - direct.ttfb, sign=True)
        else:
            first_text = _ms(first)
        late = worst = None
        if row.chunk1 and direct_chunk1 is not None:
            late = statistics.median(row.chunk1) - direct_chunk1
            worst = max(row.chunk1) - direct_chunk1
        gap = statistics.median(row.chunk_gap) if row.chunk_gap else None
        verdict = "-"
        if row is not direct and late is not None and gap is not None:
            if late <= HELD_BACK_MS:
                verdict = "no"
            else:  # late; held back only if it came with chunk 2
                verdict = "YES" if gap < 400 else f"no, but over {HELD_BACK_MS:.0f} ms late"
        chunk1 = (
            _ms(direct_chunk1)
            if row is direct
            else f"{_ms(late, sign=True)} / {_ms(worst, sign=True)}"
            if late is not None
            else "-"
        )
        label = "direct (absolute)" if row is direct else row.name
        lines.append(f"{label:22}{first_text:>10}{chunk1:>18}{_ms(gap):>9}  {verdict}")

    lines += [
        "",
        f"Client disconnect, ms from the client's close to the upstream connection's close "
        f"(streaming requests, up to {a.disconnect_trials} trials a window; within "
        f"{DISCONNECT_BOUND:.0f} s counts): p50 / p99 / propagated",
        f"{'':22}" + "".join(f"{w:>26}" for w in WINDOWS),
    ]
    for row in rows:
        cells = []
        for window in WINDOWS:
            result = row.disconnect.get(window)
            if result is None:
                cells.append("-")
                continue
            figures = (
                f"{wire.percentile(result.delays, 50):.1f} / {wire.percentile(result.delays, 99):.1f}"
                if result.delays
                else "- / -"
            )
            count = f"{len(result.delays)}/{result.trials}" + ("+" if result.gave_up else "")
            cells.append(f"{figures} / {count}")
        lines.append(f"{row.name:22}" + "".join(f"{c:>26}" for c in cells))
    if any(r.disconnect.get(w) and r.disconnect[w].window_missed for r in rows for w in WINDOWS):
        lines.append(
            "  (window not reached: "
            + "; ".join(
                f"{r.name} {w}: {r.disconnect[w].window_missed}x"
                for r in rows
                for w in WINDOWS
                if r.disconnect.get(w) and r.disconnect[w].window_missed
            )
            + ", e.g. no headers before the first chunk)"
        )
    if any(r.disconnect.get(w) and r.disconnect[w].gave_up for r in rows for w in WINDOWS):
        lines.append("  (+: stopped after 3 trials in a row that did not propagate)")
    for row in rows:
        for problem in row.problems:
            lines.append(f"  {row.name}: {problem}")
    if bench.profile_lines:
        lines += ["", "Profile (py-spy) of " + bench.profile_lines[0], *bench.profile_lines[1:]]
    if bench.notes:
        lines += ["", "Notes:", *(f"  {n}" for n in bench.notes)]
    return lines


def goals(bench: Bench) -> list[str]:
    """PASS/FAIL lines: the issue's goals, as ratios within this one run."""
    out: list[str] = []

    def check(ok: bool | None, text: str) -> None:
        out.append(f"{'SKIP' if ok is None else 'PASS' if ok else 'FAIL'}  {text}")

    name = f"ours[{DEFAULT}]"
    ours, direct, lite = bench.rows.get(name), bench.rows.get("direct"), bench.rows.get("litellm")
    added = lite_added = None
    if ours and direct and ours.small and direct.small:
        added = ours.small[0] - direct.small[0]
        check(added <= 0.6, f"{name} added p50 at c=1 (small body): {added:.3f} ms <= 0.6 ms")
    else:
        check(None, f"{name} added p50 at c=1: not measured")
    if lite and direct and lite.small and direct.small and added is not None:
        lite_added = lite.small[0] - direct.small[0]
        check(
            added <= lite_added / 20,
            f"{name} added p50 <= 1/20 of LiteLLM's: {added:.3f} vs {lite_added:.2f} ms "
            f"(1/{lite_added / max(added, 1e-6):.0f})",
        )
    else:
        check(None, "added p50 vs LiteLLM's: LiteLLM not measured")
    if lite and ours and lite.one_worker and ours.one_worker:
        ratio = ours.one_worker.rps / max(lite.one_worker.rps, 1e-6)
        check(
            ratio >= 25,
            f"{name} throughput >= 25x LiteLLM's (16 connections, 1 worker): "
            f"{ours.one_worker.rps:,.0f} vs {lite.one_worker.rps:,.0f} req/s ({ratio:.0f}x)",
        )
    else:
        check(None, "throughput vs LiteLLM's: not measured")
    ours_rows = [r for r in bench.rows.values() if r.name.startswith("ours[")]
    if direct and direct.chunk1 and ours_rows and all(r.chunk1 for r in ours_rows):
        base = statistics.median(direct.chunk1)
        late = max(statistics.median(r.chunk1) - base for r in ours_rows)
        split = min(min(r.chunk_gap) for r in ours_rows)
        check(
            late <= HELD_BACK_MS and split >= 400,
            f"no held-back chunks (every ours candidate): chunk 1 within {late:+.2f} ms of "
            f"direct (median of trials; <= {HELD_BACK_MS:.0f} ms), chunk 2 {split:.0f} ms later",
        )
    else:
        check(None, "held-back chunks: not measured for every candidate")
    results = [r.disconnect[w] for r in ours_rows for w in WINDOWS if w in r.disconnect]
    if results:
        total = sum(r.trials for r in results)
        missed = sum(r.missed for r in results)
        delays = [d for r in results for d in r.delays]
        p99 = wire.percentile(delays, 99) if delays else float("inf")
        check(
            missed == 0 and total > 0,
            f"every disconnect propagated within {DISCONNECT_BOUND:.0f} s (every ours candidate, "
            f"3 windows): {total - missed}/{total}",
        )
        check(p99 < 100, f"disconnect p99 under 100 ms (target): {p99:.1f} ms")
    else:
        check(None, "disconnects: not measured")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.bench_proxy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter loads")
    parser.add_argument("--rounds", type=int, help="interleaved rounds at c=1 (default 5)")
    parser.add_argument("--small-requests", type=int, help="small requests a round (200)")
    parser.add_argument("--big-requests", type=int, help="400 KB requests a round (40)")
    parser.add_argument("--stream-requests", type=int, help="streams a round (30)")
    parser.add_argument("--gap-trials", type=int, help="gap streams per contender (5)")
    parser.add_argument("--disconnect-trials", type=int, help="trials per window (20)")
    parser.add_argument("--duration", type=float, help="seconds of each 1-worker wrk run (10)")
    parser.add_argument(
        "--sweep-duration", type=float, help="seconds per 2-worker sweep point (4; 0 = skip)"
    )
    parser.add_argument(
        "--sweep-connections",
        default="1,2,4,8,16,32,64",
        type=lambda s: [int(x) for x in s.split(",")],
        help="connection counts of the 2-worker sweep",
    )
    parser.add_argument(
        "--profile-seconds", type=float, help="py-spy on ours under load (10; 0 = off)"
    )
    parser.add_argument(
        "--candidates", default=",".join(CANDIDATES), help="upstream clients of ours to measure"
    )
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-nginx", action="store_true")
    parser.add_argument(
        "--ours-source",
        type=Path,
        default=REPO,
        help="a checkout whose proxy/ is measured (e.g. an export of another commit)",
    )
    parser.add_argument(
        "--baseline-source",
        type=Path,
        help="another checkout measured in the same run as before[...] (e.g. a `git worktree` "
        "of the previous release), to tell a regression from noise",
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep configs and server logs")
    parser.add_argument(
        "--keep-profile", action="store_true", help="keep the collapsed stacks in .bench/"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "rounds": (5, 2),
        "small_requests": (200, 60),
        "big_requests": (40, 10),
        "stream_requests": (30, 10),
        "gap_trials": (5, 3),
        "disconnect_trials": (20, 6),
        "duration": (10.0, 3.0),
        "sweep_duration": (4.0, 2.0),
        "profile_seconds": (10.0, 5.0),
    }
    for key, (full, short) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, short if quick else full)
    args.ours_source = args.ours_source.resolve()
    if args.baseline_source is not None:
        args.baseline_source = args.baseline_source.resolve()
    return args


@contextmanager
def terminated_cleanly() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C does, so every server started is stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    started = time.monotonic()
    failed: BaseException | None = None
    with terminated_cleanly():
        try:
            bench.run()
        except (Exception, KeyboardInterrupt) as exc:
            failed = exc
        finally:
            bench.close()
    lines = report(bench)
    lines += ["", *goals(bench)]
    lines.append(f"(run took {time.monotonic() - started:.0f} s)")
    print("\n".join(lines))
    if failed is not None:
        print(f"\nthe run stopped early: {type(failed).__name__}: {failed}", file=sys.stderr)
        if not isinstance(failed, KeyboardInterrupt):
            raise failed
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
