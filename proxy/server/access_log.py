"""One structured line per request: never the Authorization header, never message content."""

from __future__ import annotations

import json
import logging

logger = logging.getLogger("proxy.access")


def log_request(
    *,
    method: str,
    path: str,
    status: int,
    upstream_ms: float | None,
    total_ms: float,
    bytes_in: int,
    bytes_out: int,
    **extra: object,
) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    record = {
        "method": method,
        "path": path,
        "status": status,
        "upstream_ms": None if upstream_ms is None else round(upstream_ms, 2),
        "total_ms": round(total_ms, 2),
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        **extra,
    }
    logger.info(json.dumps(record, separators=(",", ":")))
