"""Stores for the state tests: settings with the tests' tenant secret, stores sharing one backend
per test (like replicas sharing Redis), and the conversations and checkpoints they hold."""

from __future__ import annotations

import base64
from typing import Any

from pydantic import SecretStr

from proxy.config.settings import StoreSettings
from proxy.core.checkpoints import Checkpoint
from proxy.errors import StoreError
from proxy.state.conversations import Store
from proxy.state.opening import open_store
from proxy.state.sealing import Sealer
from proxy.state.store.base import Backend
from proxy.state.store.memory import MemoryBackend
from proxy.state.store.redis import RedisBackend
from proxy.state.tenancy import Tenancy
from tests.support.config import TENANT_SECRET

# Two encryption keys, named a and b, for sealing at rest.
KEY_A = "a:" + base64.b64encode(b"A" * 32).decode()
KEY_B = "b:" + base64.b64encode(b"B" * 32).decode()


def conversation(turns: int, *, tag: str = "") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}{tag}"})
        messages.append({"role": "assistant", "content": f"answer {i}{tag}"})
    return messages


def checkpoint(
    messages: list[dict[str, Any]], covered: int, *, parent: Checkpoint | None = None
) -> Checkpoint:
    return Checkpoint.create(
        messages,
        covered=covered,
        summary=f"summary of {covered}",
        parent_id=parent.id if parent else None,
        summary_tokens=12,
        model="gpt-4o-mini",
        dropped_messages=covered - 1,
        dropped_tokens=100,
    )


def store_settings(url: str, **overrides: Any) -> StoreSettings:
    data: dict[str, Any] = {"url": url, "tenant_secret": SecretStr(TENANT_SECRET), **overrides}
    return StoreSettings(**data)


class DownBackend(MemoryBackend):
    """A backend whose every read fails, as an unreachable Redis does."""

    async def get(self, key: str, **kwargs: Any) -> bytes | None:
        raise StoreError("connection refused")


class StoreFactory:
    """Stores sharing one backend, like replicas sharing Redis; ``backend`` reads it raw."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stores: list[Store] = []
        self.backend: Backend = (
            MemoryBackend()
            if url.startswith("memory")
            else RedisBackend.from_settings(store_settings(url))
        )

    def __call__(self, **overrides: Any) -> Store:
        settings = store_settings(self.url, **overrides)
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
