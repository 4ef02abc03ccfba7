"""Store fixtures: a raw look into Redis, and a store factory for either backend.

``make_store`` builds stores that share one backend per test, like replicas sharing Redis: for
``memory`` one in-process backend, for ``redis`` fresh clients to the module's redis-server. The
behavioural suite takes ``store_url`` (tests/conftest.py), parametrized over both backends, so
memory:// and redis:// cannot drift apart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from tests.support.redis_server import RedisServer
from tests.support.stores import StoreFactory


@pytest.fixture
async def redis_raw(shared_redis: RedisServer) -> AsyncIterator[Redis]:
    """A plain client to look at what Redis actually holds; the database is emptied first."""
    client = Redis.from_url(shared_redis.url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def make_store(store_url: str) -> AsyncIterator[StoreFactory]:
    factory = StoreFactory(store_url)
    yield factory
    await factory.aclose()
