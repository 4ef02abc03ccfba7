"""The proxy with its httpx client over httpx-aiohttp's transport: a benchmark candidate only.

httpx-aiohttp is not a project dependency; the benchmark installs it into .bench/extra and puts
that on PYTHONPATH for this process alone. Run like ``python -m proxy serve``:
``python -m tests.bench.httpx_aiohttp_app --config F --port P --workers N``.
"""

from __future__ import annotations

import argparse
import os

import httpx
import uvicorn
from httpx_aiohttp import AiohttpTransport
from starlette.applications import Starlette

from proxy.app import create_app
from proxy.cli import logging_config, long_lived
from proxy.config.settings import CONFIG_PATH_ENV, load_settings
from proxy.upstream.httpx_client import HttpxUpstream


def create_app_httpx_aiohttp() -> Starlette:
    """uvicorn factory: settings from $COMPACTION_PROXY_CONFIG, as for ``serve``'s workers."""
    settings = load_settings()
    upstream = settings.upstream
    # The transport opens its aiohttp session lazily, inside the worker's running loop.
    transport = AiohttpTransport(
        limits=httpx.Limits(
            max_connections=upstream.max_connections,
            max_keepalive_connections=upstream.max_connections,
            keepalive_expiry=upstream.keepalive_seconds,
        ),
        trust_env=False,
    )
    app = create_app(settings, upstream=HttpxUpstream.from_settings(upstream, transport=transport))
    return long_lived(app)  # as `serve` does


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    os.environ[CONFIG_PATH_ENV] = os.path.abspath(args.config)
    server = load_settings().server
    # The same server options as `python -m proxy serve` (proxy/cli.py).
    uvicorn.run(
        "tests.bench.httpx_aiohttp_app:create_app_httpx_aiohttp",
        factory=True,
        host=server.host,
        port=args.port,
        workers=args.workers,
        access_log=False,
        log_config=logging_config(server.log_level, access_log=server.access_log),
        timeout_graceful_shutdown=server.shutdown_grace_seconds,
        server_header=False,
        date_header=False,
    )


if __name__ == "__main__":
    main()
