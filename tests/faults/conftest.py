"""Fixtures of the fault suite: a private redis-server behind a fault proxy, and
``compaction-proxy serve`` processes pointed at it and at the scripted mock provider
(``redis_server``, ``provider``, ``mock`` and in-process proxies come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.replicas import Replica, proxy_config
from tests.faults.tcp_fault import FaultProxy
from tests.support.provider import Provider
from tests.support.redis_server import RedisServer


@pytest.fixture
def fault(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as proxy:
        yield proxy


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
    """start_replica(store_url, **sections) -> a running proxy process in front of ``provider``
    (proxy_config with ``sections`` merged), stopped by pid."""

    def start(store_url: str, **sections: Any) -> Replica:
        return start_serve(
            proxy_config(provider=provider.mock.url, store_url=store_url, **sections)
        )

    return start
