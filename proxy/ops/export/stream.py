"""The Redis Stream sink: each new summary added to a stream with XADD."""

from __future__ import annotations

import json
from typing import Any

import redis
import redis.asyncio
from redis.typing import EncodableT, FieldT

from proxy.config.ops import RedisStreamExport
from proxy.errors import ExportError
from proxy.ops.export.events import SummaryEvent


class RedisStreamSink:
    """XADD of each summary's fields (strings; null as ""), the stream capped near ``maxlen``."""

    name = "redis_stream"

    def __init__(self, settings: RedisStreamExport) -> None:
        self._settings = settings
        self._client = redis.asyncio.Redis.from_url(
            settings.url, socket_timeout=5, socket_connect_timeout=5
        )

    async def deliver(self, event: SummaryEvent, body: bytes) -> None:
        fields: dict[FieldT, EncodableT] = {k: _field(v) for k, v in event.payload().items()}
        try:
            await self._client.xadd(
                self._settings.stream, fields, maxlen=self._settings.maxlen, approximate=True
            )
        except (redis.RedisError, OSError) as exc:
            raise ExportError(f"XADD failed: {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _field(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)
