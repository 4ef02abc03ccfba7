"""Server processes the benchmark starts: their process trees, CPU time, and a clean stop.

Only processes started here are ever signalled, by pid; a descendant is remembered with its start
time so that a reused pid is never mistaken for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state is index 0)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(")") + 2 :].split()


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


class Server:
    """A server process started by the benchmark, with its output in a log file."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.log = log
        self.stop_signal = stop_signal
        with log.open("wb") as out:
            # A session of its own: a Ctrl-C reaches the benchmark only, which stops this by pid.
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid = self.popen.pid
        self._known: dict[int, str] = {}  # pid -> start time, for this process and descendants

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tree(self) -> list[int]:
        """This process and its living descendants (remembered for the final stop)."""
        children = _children()
        pids, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            fields = _stat(pid)
            if fields is None:
                continue
            pids.append(pid)
            self._known.setdefault(pid, fields[19])
            todo.extend(children.get(pid, []))
        return pids

    def workers(self) -> list[int]:
        """The processes that serve: the leaves of the tree (the process itself when alone)."""
        children = _children()
        return [pid for pid in self.tree() if not children.get(pid)]

    def cpu_seconds(self) -> float:
        """User + system CPU time of the whole tree so far."""
        total = 0
        for pid in self.tree():
            fields = _stat(pid)
            if fields is not None:
                total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def busy_seconds(self) -> float:
        """CPU time of the tree's living threads so far, to the nanosecond (the scheduler's own
        count): finer than ``cpu_seconds``' 10 ms ticks, for a figure per request over a few
        hundred requests. A thread that ends between two readings is missed: for servers whose
        threads live as long as they serve."""
        total = 0
        for pid in self.tree():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                for task in os.scandir(f"/proc/{pid}/task"):
                    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                        total += int(Path(task.path, "schedstat").read_text().split()[0])
        return total / 1e9

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, timeout: float = 15.0) -> None:
        self.tree()
        if self.alive():
            self.popen.send_signal(self.stop_signal)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        deadline = time.monotonic() + 5
        for pid, started in self._known.items():
            while (fields := _stat(pid)) is not None and fields[19] == started:
                if fields[0] == "Z" or time.monotonic() > deadline:
                    if fields[0] != "Z":
                        os.kill(pid, signal.SIGKILL)  # a worker its parent did not take down
                    break
                time.sleep(0.05)


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def machine_busy(seconds: float = 2.0) -> float:
    """The share of all CPUs that was busy during ``seconds`` (whoever used it)."""
    busy0, total0 = _busy_jiffies()
    time.sleep(seconds)
    busy1, total1 = _busy_jiffies()
    return (busy1 - busy0) / max(1, total1 - total0)


class OthersShare:
    """The share of all CPUs used by processes this run did not start, between start and stop.

    Ours are this process and its waited-for descendants (servers stopped, wrk, py-spy): once a
    process is reaped its CPU time counts in its parent's children times, up to ours.
    """

    def __init__(self) -> None:
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[int, int, float]:
        busy, total = _busy_jiffies()
        t = os.times()
        return busy, total, t.user + t.system + t.children_user + t.children_system

    def stop(self) -> float:
        busy0, total0, ours0 = self._start
        busy1, total1, ours1 = self._sample()
        others = (busy1 - busy0) / CLK_TCK - (ours1 - ours0)
        return max(0.0, others / max(1e-9, (total1 - total0) / CLK_TCK))
