"""Opening the conversation store from its settings: ``open_store(settings)`` is the one entry
point the app calls at start-up."""

from __future__ import annotations

from proxy.config.store import StoreSettings
from proxy.state.conversations import Store
from proxy.state.sealing import Sealer
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy


def open_store(settings: StoreSettings, *, tenancy: Tenancy | None = None) -> Store:
    """Build the store named by ``settings.url``; connections open lazily on first use.

    Raises ConfigError for an unusable URL or encryption key. ``tenancy`` lets the app share one
    server secret between the store and its own tenant derivation (else the store has its own).
    """
    tenancy = tenancy or Tenancy.from_settings(settings)
    sealer = Sealer.from_settings(settings.encryption_keys)
    if settings.url.startswith("memory://"):
        backend = MemoryBackend(max_keys=settings.max_conversations)
        return Store(backend, settings=settings, tenancy=tenancy, sealer=sealer)
    # Imported here so that memory:// deployments never import redis-py.
    from proxy.state.store.redis import RedisBackend

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
        from proxy.state.store.redis import parse_cluster_url, parse_sentinel_url

        parse = (
            parse_sentinel_url if settings.url.startswith("redis+sentinel") else parse_cluster_url
        )
        parse(settings.url)
