"""Store fixtures: one private redis-server per module, and a store factory for either backend.

``make_store`` builds stores that share one backend per test, like replicas sharing Redis: for
``memory`` one in-process backend, for ``redis`` fresh clients to the same server. The behavioural
suite takes ``backend_name`` parametrized over both, so memory:// and redis:// cannot drift apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from proxy.config.settings import StoreSettings
from proxy.state.conversations import Store
from proxy.state.opening import open_store
from proxy.state.sealing import Sealer
from proxy.state.store.base import Backend
from proxy.state.store.memory import MemoryBackend
from proxy.state.store.redis import RedisBackend
from proxy.state.tenancy import Tenancy
from tests.redis_server import RedisServer, own_redis_server

TENANT_SECRET = "test-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with own_redis_server() as server:
        yield server


@pytest.fixture
async def redis_raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client to look at what Redis actually holds; the database is emptied first."""
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


def settings_for(url: str, **overrides: Any) -> StoreSettings:
    data: dict[str, Any] = {"url": url, "tenant_secret": SecretStr(TENANT_SECRET), **overrides}
    return StoreSettings(**data)


@pytest.fixture(params=["memory", "redis"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_url(backend_name: str, request: pytest.FixtureRequest) -> str:
    if backend_name == "memory":
        return "memory://"
    server: RedisServer = request.getfixturevalue("redis_server")
    with SyncRedis.from_url(server.url) as client:
        client.flushdb()
    return server.url


class StoreFactory:
    """Stores sharing one backend, like replicas sharing Redis; ``backend`` reads it raw."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stores: list[Store] = []
        self.backend: Backend = (
            MemoryBackend()
            if url.startswith("memory")
            else RedisBackend.from_settings(settings_for(url))
        )

    def __call__(self, **overrides: Any) -> Store:
        settings = settings_for(self.url, **overrides)
        if self.url.startswith("memory"):
            store = Store(
                self.backend,
                settings=settings,
                tenancy=Tenancy.from_settings(settings),
                sealer=Sealer.from_settings(settings.encryption_keys),
            )
        else:
            store = open_store(settings)
        self.stores.append(store)
        return store

    async def aclose(self) -> None:
        for store in self.stores:
            await store.aclose()
        await self.backend.aclose()


@pytest.fixture
async def make_store(store_url: str) -> AsyncIterator[StoreFactory]:
    factory = StoreFactory(store_url)
    yield factory
    await factory.aclose()
