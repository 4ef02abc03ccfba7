"""Sending an answer the proxy gives itself (``Decision.reply``: an agent's own compaction answered
from a ready summary, docs/agent-compaction.md): one response, nothing sent upstream."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.compaction.decision import LocalReply
from proxy.server.access_log import Exchange
from proxy.types import Send


async def send_reply(
    send: Send,
    reply: LocalReply,
    exchange: Exchange,
    *,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with ``reply`` (its body whole, an SSE stream included), recorded in ``exchange``."""
    exchange.status = reply.status
    await send(
        {
            "type": "http.response.start",
            "status": reply.status,
            "headers": [
                (b"content-type", reply.content_type),
                (b"content-length", str(len(reply.body)).encode()),
                *extra_headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": reply.body})
    exchange.bytes_out = len(reply.body)
