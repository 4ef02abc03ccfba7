"""``compaction-proxy serve`` as real processes: config file, free port, logs, stopped by pid.

The fault suite runs the proxy the way users do, so what it greps (logs on stderr, /metrics) is
what an operator would see, and a replica's RSS is a real process's.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.config import EVERY_FOUR_INTERACTIONS, SUMMARIZER_MODEL, config_yaml
from tests.support.processes import Server
from tests.support.servers import free_port

CLI = Path(sys.executable).parent / "compaction-proxy"
ADMIN_TOKEN = "admin-token-for-faults"
TENANT_SECRET = "faults-tenant-secret-0123456789abcdef"


def proxy_config(*, provider: str, store_url: str, **sections: Any) -> str:
    """The YAML of a replica: a summary every 4 interactions keeping 2, inline, by the mock
    provider's summarizer, logs at info with the access log; then ``sections``."""
    replica = {
        "server": {"log_level": "info", "access_log": True},
        "store": {"url": store_url, "tenant_secret": TENANT_SECRET, "max_checkpoints": 64},
        "summarizer": {"model": SUMMARIZER_MODEL, "timeout_seconds": 10},
        "admin": {"token": ADMIN_TOKEN},
        "policies": {"default": EVERY_FOUR_INTERACTIONS},
    }
    return config_yaml(replica, sections, provider=provider)


class Replica:
    """One ``compaction-proxy serve`` process on a free loopback port."""

    def __init__(self, config: str, workdir: Path, name: str = "proxy") -> None:
        self.port = free_port()
        self.name = name
        path = workdir / f"{name}.yaml"
        path.write_text(config, encoding="utf-8")
        argv = [str(CLI), "serve", "--config", str(path), "--host", "127.0.0.1"]
        argv += ["--port", str(self.port)]
        self.server = Server(name, argv, log=workdir / f"{name}.log", env=dict(os.environ))
        self.wait_ready()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.server.pid

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.server.alive():
                break
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not start:\n{self.server.log_tail(30)}")

    def readyz(self) -> dict:
        return httpx.get(f"{self.url}/readyz", timeout=5).json()

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=5).text

    def logs(self) -> str:
        return self.server.log.read_text(errors="replace")

    def rss_kib(self) -> int:
        """VmRSS of the process, from /proc (0 once it is gone)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except FileNotFoundError:
            pass
        return 0

    def stop(self) -> None:
        self.server.stop()
