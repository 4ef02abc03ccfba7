"""Fixtures of the fault suite: a private redis-server behind a fault proxy, the scripted mock
provider, and ``compaction-proxy serve`` processes pointed at both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.replicas import Replica, proxy_config
from tests.faults.tcp_fault import FaultProxy
from tests.mock_upstream import MockUpstream
from tests.proxy.conftest import mock, start_proxy  # noqa: F401  (in-process proxies)
from tests.proxy.provider import Provider
from tests.redis_server import RedisServer, own_redis_server
from tests.servers import ThreadedUvicorn


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with own_redis_server() as server:
        yield server


@pytest.fixture
def fault(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as proxy:
        yield proxy


@pytest.fixture
def provider() -> Iterator[Provider]:
    upstream = MockUpstream()
    with ThreadedUvicorn(upstream) as server:
        upstream.url = server.url  # type: ignore[attr-defined]
        yield Provider(upstream)


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[Callable[[str], Replica]]:
    """start_serve(config) -> a running ``compaction-proxy serve`` with that config file, stopped
    by pid at the end."""
    replicas: list[Replica] = []

    def start(config: str) -> Replica:
        replica = Replica(config, tmp_path, name=f"proxy{len(replicas)}")
        replicas.append(replica)
        return replica

    yield start
    for replica in replicas:
        replica.stop()


@pytest.fixture
def start_replica(
    start_serve: Callable[[str], Replica], provider: Provider, tiktoken_files: Path
) -> Callable[..., Replica]:
    """start_replica(store_url, extra_store=..., extra_upstream=...) -> a running proxy
    process, stopped by pid."""

    def start(store: str, *, extra_store: str = "", extra_upstream: str = "") -> Replica:
        return start_serve(
            proxy_config(
                upstream=provider.mock.url,  # type: ignore[attr-defined]
                store=store,
                extra_store=extra_store,
                extra_upstream=extra_upstream,
            )
        )

    return start
