"""Responses the proxy cuts off on purpose, and keeping uvicorn quiet about exactly those.

When the provider fails after the response headers went out, the only honest signal left to the
client is a connection closed mid-body: ending the body cleanly would make a truncated answer look
complete. In ASGI that means returning without the final body message, and uvicorn then logs
"ASGI callable returned without completing response." at ERROR, on top of our own line, for every
such request. ``cut_off`` logs one clear WARNING and marks the response in a contextvar; the
request runs in the task uvicorn logs from, so ``QuietAborts`` (a filter on uvicorn's error
logger) can drop that one message for marked responses and let every other one through.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from proxy.errors import UpstreamError

logger = logging.getLogger("proxy.upstream")

UVICORN_LOGGER = "uvicorn.error"
_UNFINISHED = "ASGI callable returned without completing response."
_CUT_OFF: ContextVar[bool] = ContextVar("proxy_response_cut_off", default=False)


def cut_off(error: UpstreamError, *, route: str) -> int:
    """Log a failure after the headers were sent, mark the response; the status to count."""
    _CUT_OFF.set(True)
    logger.warning(
        "provider failed mid-response on route %s (%s); the client's response was cut off "
        "unfinished",
        route,
        error.message,
    )
    return error.status_code


class QuietAborts(logging.Filter):
    """Drops uvicorn's "returned without completing response" for responses we cut off."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _UNFINISHED and _CUT_OFF.get())


def quiet_uvicorn() -> None:
    """Install ``QuietAborts`` on uvicorn's error logger, once per process."""
    target = logging.getLogger(UVICORN_LOGGER)
    if not any(isinstance(f, QuietAborts) for f in target.filters):
        target.addFilter(QuietAborts())
