"""What Redis holds about tenants and conversation ids, and the shared tenant secret."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from proxy.config.settings import StoreSettings
from proxy.state.opening import open_store
from proxy.state.tenancy import SECRET_KEY
from tests.support.redis_server import RedisServer
from tests.support.stores import KEY_A, KEY_B, StoreFactory, checkpoint, conversation

pytestmark = pytest.mark.anyio


async def test_listing_names_conversations_the_values_do_not(make_store: StoreFactory) -> None:
    store = make_store()
    messages = conversation(3)
    for name in ("order-66-alpha", "order-67-beta"):
        assert await store.add_checkpoint("t", name, checkpoint(messages, 3))
    listed = sorted(
        info.conversation_id for info in (await store.list_conversations("t")).conversations
    )
    assert listed == ["order-66-alpha", "order-67-beta"]
    assert (await store.list_conversations("another-tenant")).conversations == []
    for key in await make_store.backend.scan("cproxy:r:", limit=100):
        value = await make_store.backend.get(key)
        assert value is not None and b"order-6" not in value
    loaded = await store.load("t", "order-66-alpha")
    assert loaded is not None and loaded.conversation_id == "order-66-alpha"


async def test_a_secret_that_cannot_be_opened_degrades_and_names_the_key(
    shared_redis: RedisServer, redis_raw: Redis
) -> None:
    plain = open_store(StoreSettings(url=shared_redis.url))
    await plain.start()
    assert plain.state().state == "ok"
    # Encryption switched on later: the plain secret is refused, never silently replaced.
    sealed = open_store(StoreSettings(url=shared_redis.url, encryption_keys=[SecretStr(KEY_A)]))
    try:
        await sealed.start()
        health = sealed.state()
        assert health.state == "degraded" and SECRET_KEY in (health.reason or "")
        # Still serving, in-process.
        assert await sealed.add_checkpoint("t", "c", checkpoint(conversation(2), 3))
        assert (await sealed.load("t", "c")) is not None
        assert await redis_raw.dbsize() == 1  # only the secret: nothing under provisional keys
    finally:
        await sealed.aclose()
        await plain.aclose()


async def test_a_key_rotation_reseals_the_secret_so_the_old_key_can_go(
    shared_redis: RedisServer, redis_raw: Redis
) -> None:
    def store_with(*keys: str):
        return open_store(
            StoreSettings(url=shared_redis.url, encryption_keys=[SecretStr(k) for k in keys])
        )

    stores = [store_with(KEY_A), store_with(KEY_B, KEY_A), store_with(KEY_B)]
    try:
        for store in stores:  # the rollout: before, during and after the rotation
            await store.start()
            assert store.state().state == "ok"
        tenants = {store.tenancy.tenant("sk-caller") for store in stores}
        assert len(tenants) == 1  # one secret throughout
        assert (await redis_raw.get(SECRET_KEY)).startswith(b"\xa5G1\x01b")  # sealed with b
    finally:
        for store in stores:
            await store.aclose()
