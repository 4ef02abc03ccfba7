"""The webhook sink: each new summary POSTed as JSON, signed, retried with backoff.

The body is signed with HMAC-SHA256 under ``export.webhook.secret`` and the signature sent as
``X-Compaction-Signature: sha256=<hex>``; a receiver recomputes it over the raw body it got and
compares in constant time (docs/operations.md shows the code). Delivery is at least once: a POST
that timed out may have arrived, so receivers keep the ``checkpoint_id`` (also sent as
``X-Compaction-Delivery``) to ignore a repeat. A 5xx, a 429 or a connection error is retried
after ``backoff_seconds``, doubled each time up to ``max_backoff_seconds``, ``max_attempts`` tries
in all; any other answer but a 2xx gives up at once (retrying would not change it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import httpx

from proxy.compaction import protocol
from proxy.config.ops import WebhookExport
from proxy.errors import ExportError
from proxy.ops.export.events import EVENT_TYPE, SummaryEvent

SIGNATURE_HEADER = protocol.WEBHOOK_SIGNATURE
DELIVERY_HEADER = protocol.WEBHOOK_DELIVERY
EVENT_HEADER = protocol.WEBHOOK_EVENT


def signature(secret: str, body: bytes) -> str:
    """The ``X-Compaction-Signature`` value of ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """Whether ``header`` is the signature of ``body`` (constant-time comparison)."""
    return hmac.compare_digest(signature(secret, body), header)


def _retryable(status: int) -> bool:
    return status >= 500 or status == 429


class WebhookSink:
    """POSTs each summary, signed, until a 2xx or it gives up (see the module docstring)."""

    name = "webhook"

    def __init__(self, settings: WebhookExport, *, client: httpx.AsyncClient | None = None) -> None:
        self._settings = settings
        self._secret = settings.secret.get_secret_value()
        self._client = client or httpx.AsyncClient(
            timeout=settings.timeout_seconds, trust_env=False, follow_redirects=False
        )

    async def deliver(self, event: SummaryEvent, body: bytes) -> None:
        settings = self._settings
        headers = {
            "content-type": "application/json",
            SIGNATURE_HEADER: signature(self._secret, body),
            DELIVERY_HEADER: event.checkpoint.id,
            EVENT_HEADER: EVENT_TYPE,
        }
        reason = ""
        for attempt in range(settings.max_attempts):
            if attempt:
                delay = settings.backoff_seconds * 2 ** (attempt - 1)
                await asyncio.sleep(min(delay, settings.max_backoff_seconds))
            try:
                response = await self._client.post(settings.url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
                continue
            if 200 <= response.status_code < 300:
                return
            reason = f"HTTP {response.status_code}"
            if not _retryable(response.status_code):
                break
        raise ExportError(f"webhook gave up after {attempt + 1} attempt(s): {reason}")

    async def aclose(self) -> None:
        await self._client.aclose()
