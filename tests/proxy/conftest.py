"""Fixtures for the proxy's wire tests: a real mock provider and a real proxy, on free ports."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from proxy.app import create_app
from proxy.config.settings import Settings, parse_settings
from proxy.server.run import uvicorn_options
from tests.mock_upstream import MockUpstream
from tests.servers import ThreadedUvicorn


@contextlib.contextmanager
def running_mock() -> Iterator[MockUpstream]:
    """A MockUpstream served on a free loopback port; its base URL is ``.url``."""
    upstream = MockUpstream()
    with ThreadedUvicorn(upstream) as server:
        upstream.url = server.url  # type: ignore[attr-defined]
        yield upstream


@pytest.fixture
def mock() -> Iterator[MockUpstream]:
    with running_mock() as upstream:
        yield upstream


def settings_for(upstream_url: str, yaml_text: str = "", **upstream: Any) -> Settings:
    settings = parse_settings(yaml_text, environ={})
    fields = {"base_url": f"{upstream_url}/v1", **upstream}
    return settings.model_copy(update={"upstream": settings.upstream.model_copy(update=fields)})


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


@pytest.fixture
def start_proxy() -> Iterator[Callable[..., ThreadedUvicorn]]:
    """start_proxy(settings) -> a running proxy (running_proxies), stopped at the end of the test."""
    with running_proxies() as start:
        yield start


@pytest.fixture
def proxy(mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]) -> ThreadedUvicorn:
    return start_proxy(settings_for(mock.url))  # type: ignore[attr-defined]
