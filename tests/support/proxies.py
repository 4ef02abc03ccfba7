"""Real servers of the wire tests: the mock provider and the proxy, each under uvicorn on a free
loopback port, the proxy started as ``compaction-proxy serve`` starts it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from proxy.app import create_app
from proxy.config.settings import Settings
from proxy.server.run import uvicorn_options
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn


@contextlib.contextmanager
def running_mock() -> Iterator[MockUpstream]:
    """A MockUpstream served on a free loopback port; its base URL is ``.url``."""
    upstream = MockUpstream()
    with ThreadedUvicorn(upstream) as server:
        upstream.url = server.url
        yield upstream


@contextlib.contextmanager
def running_proxies() -> Iterator[Callable[..., ThreadedUvicorn]]:
    """start(settings) -> a running proxy, started as `serve` starts it; every one stopped when
    the block ends. ``http="h11"`` picks uvicorn's other HTTP implementation."""
    servers: list[ThreadedUvicorn] = []

    def start(settings: Settings, *, http: str = "auto", **app_options: Any) -> ThreadedUvicorn:
        # As `serve` runs it: the same uvicorn options, protocol and limits.
        server = ThreadedUvicorn(
            create_app(settings, **app_options), **uvicorn_options(settings, http=http)
        )
        servers.append(server.__enter__())
        return server

    try:
        yield start
    finally:
        for server in reversed(servers):
            server.__exit__(None, None, None)
