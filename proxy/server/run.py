"""How the proxy is served: uvicorn's options and the process's open-files limit, in one place
shared by ``compaction-proxy serve`` and the tests (which must run what users run)."""

from __future__ import annotations

import logging
from typing import Any

from proxy.config.settings import Settings
from proxy.server.guard import GuardedHTTP, Limits

logger = logging.getLogger("proxy.server")

# File descriptors a worker needs besides client connections: the provider and store pools,
# the summarizer's client, logs, the listening socket, tiktoken files.
_RESERVED_FDS = 64

# asyncio reads at most this much per data_received. The guard refuses a head over
# max_header_bytes before h11 sees it; h11's own cap (a plain-text 400) stays a read above, so it
# never acts first.
_READ_SIZE = 256 * 1024


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (often 1024 of 1048576 in containers);
    returns the soft limit in force. Every client connection is a file descriptor."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            logger.info("open-files limit raised from %d to %d", soft, hard)
            soft = hard
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-files limit from %d: %s", soft, exc)
    return soft


def connection_budget(settings: Settings) -> int:
    """server.max_connections, lowered if the open-files limit cannot hold that many client
    connections beside the worker's own pools: refusing a client with a 503 is better than
    accept() failing with EMFILE, which asyncio can only log and retry."""
    wanted = settings.server.max_connections
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except ImportError:
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    reserved = _RESERVED_FDS + settings.upstream.max_connections + settings.store.max_connections
    room = max(1, soft - reserved)
    if room < wanted:
        logger.warning(
            "server.max_connections lowered from %d to %d: the open-files limit is %d "
            "(raise it with ulimit -n / the container's nofile limit)",
            wanted,
            room,
            soft,
        )
        return room
    return wanted


def uvicorn_options(settings: Settings, *, http: str = "auto") -> dict[str, Any]:
    """uvicorn.Config/uvicorn.run keyword arguments, except host, port, workers and logging.

    ``http`` picks uvicorn's HTTP implementation under the guard: ``auto`` (httptools when
    installed, as in production), ``httptools`` or ``h11`` (tests run both).
    """
    server = settings.server
    limits = Limits(
        header_timeout=server.header_timeout_seconds,
        body_idle_timeout=server.body_idle_timeout_seconds,
        max_header_bytes=server.max_header_bytes,
        max_connections=connection_budget(settings),
    )
    return {
        "http": GuardedHTTP(limits, implementation=http),
        "h11_max_incomplete_event_size": server.max_header_bytes + _READ_SIZE,
        # The proxy serves no WebSockets; an upgraded connection would leave the guard's sight.
        "ws": "none",
        "access_log": False,  # the proxy writes its own, without secrets (proxy/server/access_log.py)
        "timeout_graceful_shutdown": server.shutdown_grace_seconds,
        # The provider's Date and Server headers are relayed; uvicorn must not add a second pair.
        "server_header": False,
        "date_header": False,
    }
