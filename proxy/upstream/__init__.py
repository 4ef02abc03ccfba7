"""Clients towards the provider: one small interface, interchangeable implementations."""

from __future__ import annotations

from proxy.config.settings import UpstreamSettings
from proxy.upstream.base import UpstreamClient, UpstreamResponse

__all__ = ["UpstreamClient", "UpstreamResponse", "open_upstream"]


def open_upstream(settings: UpstreamSettings) -> UpstreamClient:
    """Build the configured client; call it inside a running event loop (aiohttp needs one)."""
    if settings.transport == "httpx":
        from proxy.upstream.httpx_client import HttpxUpstream

        return HttpxUpstream.from_settings(settings)
    from proxy.upstream.aiohttp_client import AiohttpUpstream

    return AiohttpUpstream.from_settings(settings)
