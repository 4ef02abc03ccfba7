"""Waiting, bounded, for a condition or for a proxy to finish its work after responses: no
timing assumptions.

A response's after-work (queueing its ahead-of-time summary) runs once its last byte is sent and
before /metrics counts the request; so the count is awaited first, then an empty background queue.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx


def wait_until(condition: Callable[[], bool], *, timeout: float = 5.0) -> bool:
    """Whether ``condition`` became true within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def settle(proxy_url: str, *, route: str, answered: int, timeout: float = 10) -> None:
    """Until /metrics counts ``answered`` 200s on ``route`` and no summary is queued or running."""
    counted = re.compile(
        rf'^proxy_requests_total{{route="{route}",status="200"}} (\S+)$', re.MULTILINE
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{proxy_url}/metrics").text
        found = counted.search(metrics)
        done = found is not None and float(found.group(1)) >= answered
        if done and "\nproxy_background_queue_depth 0.0\n" in metrics:
            return
        time.sleep(0.02)
    raise AssertionError(f"the proxy did not settle within {timeout} s")
