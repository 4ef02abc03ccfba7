"""Conversation state: a small backend interface, memory and Redis backends, and the store on top.

``open_store(settings)`` is the one entry point the app calls at start-up.
"""

from __future__ import annotations

from proxy.config import StoreSettings
from proxy.sealing import Sealer
from proxy.store.conversations import (
    ConversationInfo,
    ConversationPage,
    Store,
    StoreCounters,
    StoreHealth,
)
from proxy.store.memory import MemoryBackend
from proxy.tenancy import Tenancy

__all__ = [
    "ConversationInfo",
    "ConversationPage",
    "Store",
    "StoreCounters",
    "StoreHealth",
    "check_store_settings",
    "open_store",
]


def open_store(settings: StoreSettings, *, tenancy: Tenancy | None = None) -> Store:
    """Build the store named by ``settings.url``; connections open lazily on first use.

    Raises ConfigError for an unusable URL or encryption key. ``tenancy`` lets the app share one
    server secret between the store and its own tenant derivation (``store.tenancy`` otherwise).
    """
    tenancy = tenancy or Tenancy.from_settings(settings)
    sealer = Sealer.from_settings(settings.encryption_keys)
    if settings.url.startswith("memory://"):
        backend = MemoryBackend(max_keys=settings.max_conversations)
        return Store(backend, settings=settings, tenancy=tenancy, sealer=sealer)
    # Imported here so that memory:// deployments never import redis-py.
    from proxy.store.redis import RedisBackend

    return Store(
        RedisBackend.from_settings(settings),
        settings=settings,
        tenancy=tenancy,
        sealer=sealer,
        fallback=MemoryBackend(max_keys=settings.max_conversations),
    )


def check_store_settings(settings: StoreSettings) -> None:
    """Raise ConfigError for an unusable URL or encryption key, without connecting anywhere
    (``check-config`` and ``serve`` call it before anything starts)."""
    Sealer.from_settings(settings.encryption_keys)
    if settings.url.startswith(("redis+sentinel://", "redis+cluster://")):
        from proxy.store.redis import parse_cluster_url, parse_sentinel_url

        parse = (
            parse_sentinel_url if settings.url.startswith("redis+sentinel") else parse_cluster_url
        )
        parse(settings.url)
