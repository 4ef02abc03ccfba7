"""A real, private ``redis-server`` for tests and benchmarks: free port, temp dir, stopped by pid.

Never the server on 6379: each instance listens on a port of its own, persists nothing
(``--save "" --appendonly no``) and is stopped by its own pid. ``kill()`` and ``start()`` again on
the same port simulate an outage and a recovery.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from tests.support.servers import free_port, wait_for_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def redis_available() -> bool:
    return Path(REDIS_SERVER).is_file() and os.access(REDIS_SERVER, os.X_OK)


def skip_without_redis() -> None:
    """Skips the calling test when no redis-server binary is installed."""
    if not redis_available():
        pytest.skip(f"redis-server not found at {REDIS_SERVER} (apt-get install redis-server)")


@contextlib.contextmanager
def own_redis_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, stopped afterwards; skips the test without one."""
    skip_without_redis()
    with RedisServer() as server:
        yield server


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free as well."""
    for _ in range(100):
        port = free_port()
        if port + 10000 <= 65535 and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RedisServer:
    """One private server; ``sentinel_for=PORT`` makes it a sentinel watching that master."""

    def __init__(
        self, *extra_args: str, port: int | None = None, sentinel_for: int | None = None
    ) -> None:
        self.port = port or free_port()
        self._extra = extra_args
        self._sentinel_for = sentinel_for
        self._dir = tempfile.TemporaryDirectory(prefix="redis-test-")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def directory(self) -> Path:
        return Path(self._dir.name)

    def start(self, *, timeout: float = 10.0) -> RedisServer:
        if not redis_available():
            raise RuntimeError(f"redis-server not found at {REDIS_SERVER}")
        common = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", self._dir.name,
                  "--daemonize", "no", "--loglevel", "warning"]  # fmt: skip
        if self._sentinel_for is None:
            args = [REDIS_SERVER, *common, "--save", "", "--appendonly", "no", *self._extra]
        else:
            # A sentinel rewrites its config file, so it gets one of its own in the temp dir.
            conf = self.directory / "sentinel.conf"
            conf.write_text(f"sentinel monitor mymaster 127.0.0.1 {self._sentinel_for} 1\n")
            args = [REDIS_SERVER, str(conf), "--sentinel", *common, *self._extra]
        log = (self.directory / "redis.log").open("ab")
        with log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, timeout=timeout)
        except TimeoutError:
            self.stop()
            raise
        return self

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            self._proc = None
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self._proc = None

    def kill(self) -> None:
        """Die abruptly (SIGKILL): clients see reset connections, as in a crash."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
