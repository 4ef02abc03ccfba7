"""Load from wrk (closed loop, N keep-alive connections) and a py-spy profile of a server under it."""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import Server

_LINE = re.compile(r"^WRK (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+)$", re.M)


@dataclass
class Load:
    connections: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int  # socket errors, timeouts and non-2xx answers
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per watched server

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def cpu_ms_per_request(self, name: str) -> float:
        return self.cpu[name] * 1000 / self.requests if self.requests else float("nan")


def wrk_script(tmp: Path, body: bytes, key: str) -> Path:
    """A wrk script that POSTs ``body`` and prints its figures on one parseable line."""
    script = tmp / f"wrk-{abs(hash(body))}.lua"
    text = body.decode()
    assert "]==]" not in text
    script.write_text(
        f"""wrk.method = "POST"
wrk.body = [==[{text}]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d %d %d %d %.1f %.1f\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""
    )
    return script


def run_wrk(
    wrk: str,
    port: int,
    script: Path,
    *,
    connections: int,
    seconds: float,
    watch: list[Server],
    path: str = "/v1/chat/completions",
) -> Load:
    """One wrk run (one thread: wrk must leave CPU to the servers on this small machine)."""
    before = {s.name: s.cpu_seconds() for s in watch}
    argv = [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "5s"]
    argv += ["-s", str(script), f"http://127.0.0.1:{port}{path}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    match = _LINE.search(done.stdout)
    if match is None:
        raise RuntimeError(f"wrk printed no figures: {done.stdout[-300:]} {done.stderr[-300:]}")
    requests, duration_us, *errors = (int(g) for g in match.groups()[:7])
    load = Load(
        connections=connections,
        requests=requests,
        seconds=duration_us / 1e6,
        p50_ms=float(match.group(8)) / 1000,
        p99_ms=float(match.group(9)) / 1000,
        errors=sum(errors),
    )
    load.cpu = {s.name: s.cpu_seconds() - before[s.name] for s in watch}
    return load


def profile(py_spy: Path, pid: int, seconds: float, out: Path) -> subprocess.Popen:
    """Start py-spy on ``pid`` for ``seconds``; collapsed stacks go to ``out``."""
    argv = [str(py_spy), "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    argv += ["--rate", "200", "--format", "raw", "--output", str(out)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # attached before the load starts
    return process


_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")

# Where a sample's time goes: the innermost frame in one of these decides (json and logging are
# not listed: their caller says what they were doing).
AREAS = (
    ("proxy/accesslog", "access log (json.dumps + logging)"),
    ("proxy/dialects/chat_completions", "parse the chat request"),
    ("proxy/", "proxy's own code (endpoints, forward, headers)"),
    ("aiohttp/", "upstream client (aiohttp)"),
    ("multidict/", "upstream client (aiohttp)"),
    ("yarl/", "upstream client (aiohttp)"),
    ("httpx/", "upstream client (httpx)"),
    ("httpcore/", "upstream client (httpx)"),
    ("httpx_aiohttp/", "upstream client (httpx)"),
    ("anyio/", "upstream client (httpx)"),
    ("uvicorn/", "uvicorn (HTTP parsing, ASGI glue)"),
    ("starlette/", "starlette (routing)"),
    ("asyncio/runners", "event loop itself (uvloop's C: I/O syscalls, callbacks)"),
    ("asyncio/", "asyncio (tasks, futures, events)"),
)


def _area(file: str) -> str:
    for prefix, area in AREAS:
        if prefix in file:
            return area
    return "other"


def summarize_profile(raw: Path, *, top: int = 10) -> list[str]:
    """Busy samples by area (innermost matching frame) and the busiest functions (self time)."""
    by_area: Counter[str] = Counter()
    by_leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for text in stack.split(";"):
            match = _FRAME.match(text)
            if match is not None:
                frames.append((match["func"], match["file"]))
        if not frames:
            continue
        by_area[next((_area(f) for _, f in reversed(frames) if _area(f) != "other"), "other")] += (
            count
        )
        func, file = frames[-1]
        by_leaf[f"{func} ({file})"] += count
        for name in {f"{fn} ({fl})" for fn, fl in frames if fl.startswith("proxy/")}:
            inclusive[name] += count
    if not total:
        return ["no samples"]
    lines = [f"{total} busy samples; by area (innermost frame of a known package):"]
    lines += [f"  {100 * n / total:5.1f}%  {area}" for area, n in by_area.most_common()]
    lines.append("our functions, inclusive (entry points left out):")
    ours = [(name, n) for name, n in inclusive.most_common() if n < 0.99 * total][:top]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in ours]
    lines.append("busiest functions, self:")
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in by_leaf.most_common(top)]
    return lines
