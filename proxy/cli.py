"""Command line: ``serve`` runs the proxy, ``check-config`` validates a file, ``simulate`` shows
what a policy would do to a conversation file, ``eval`` measures what a policy's compaction
loses, ``wrap`` runs a coding agent through it."""

# This module composes the commands: each lives in its own module (``proxy.tools``) with an
# ``add_arguments`` and a ``command``, except ``serve``, which builds the app (``proxy.app``) and
# runs it under uvicorn; that composition is the command line's own (server/ cannot import the
# app that imports it). The docstring above is the --help description.

from __future__ import annotations

import argparse
import gc
import logging.config
import os
import sys
from collections.abc import Sequence
from typing import Any

from proxy.config.settings import CONFIG_PATH_ENV
from proxy.errors import ConfigError
from proxy.tools import check_config, simulate, wrap
from proxy.tools.check_config import load_checked
from proxy.tools.evaluation import command as evaluation


def logging_config(level: str, *, access_log: bool = True) -> dict[str, Any]:
    """Plain lines on stderr; the access log's lines are already JSON.

    ``access_log=False`` (``server.access_log: false``) keeps the access logger below INFO, so
    its lines are not even built: at saturation they cost about a fifth of the CPU of a small
    proxied request (tests/bench/bench_proxy.py).
    """
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {
                "class": "proxy.server.log_format.PlainFormatter",
                "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
    }
    if not access_log:
        config["loggers"] = {"proxy.access": {"level": "WARNING"}}
    return config


def long_lived(app: Any) -> Any:
    """Keep everything built so far (modules, settings, the app) out of the garbage collector's
    full passes: they walk it all, stalling the event loop for 10-20 ms every few seconds under
    load, which was the whole p99 at 16 connections (tests/bench/bench_proxy.py)."""
    gc.freeze()
    return app


def worker_app() -> Any:
    """uvicorn factory for ``serve --workers N``: each worker builds its app from the file."""
    from proxy.app import create_app_from_env

    return long_lived(create_app_from_env())


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.server.run import raise_open_files_limit, uvicorn_options

    settings = load_checked(args.config)
    server = settings.server
    # Configure logging now, not in uvicorn.run, so the start-up warnings below are seen.
    log_config = logging_config(server.log_level, access_log=server.access_log)
    logging.config.dictConfig(log_config)
    raise_open_files_limit()  # before the budget of client connections is worked out
    options: dict[str, Any] = {
        "host": args.host or server.host,
        "port": args.port if args.port is not None else server.port,
        "workers": args.workers or server.workers,
        "log_config": log_config,
        **uvicorn_options(settings),
    }
    if options["workers"] > 1:
        # Worker processes build their own app from the same file.
        if args.config:
            os.environ[CONFIG_PATH_ENV] = os.path.abspath(args.config)
        uvicorn.run("proxy.cli:worker_app", factory=True, **options)
    else:
        from proxy.app import create_app

        uvicorn.run(long_lived(create_app(settings)), **options)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compaction-proxy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("serve", help="run the proxy")
    run.add_argument(
        "--config", help=f"YAML config file (default: ${CONFIG_PATH_ENV} or built-in defaults)"
    )
    run.add_argument("--host", help="override server.host")
    run.add_argument("--port", type=int, help="override server.port")
    run.add_argument("--workers", type=int, help="override server.workers")
    run.set_defaults(func=serve)

    check = commands.add_parser(
        "check-config", help="validate a config file and print it, secrets masked"
    )
    check_config.add_arguments(check)
    check.set_defaults(func=check_config.command)

    dry = commands.add_parser(
        "simulate", help="show what a policy would do to a conversation file (a dry run)"
    )
    simulate.add_arguments(dry)
    dry.set_defaults(func=simulate.command)

    measure = commands.add_parser(
        "eval", help="measure what a policy's compaction loses, against your own model"
    )
    evaluation.add_arguments(measure)
    measure.set_defaults(func=evaluation.command)

    wrapped = commands.add_parser(
        "wrap", help="run a coding agent (claude, codex, opencode) through the proxy"
    )
    wrap.add_arguments(wrapped)
    wrapped.set_defaults(func=wrap.command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    agent_args: list[str] = []
    if argv[:1] == ["wrap"]:
        argv, agent_args = wrap.split_agent_args(argv)
    args = build_parser().parse_args(argv)
    if agent_args:
        args.agent_args = agent_args
    try:
        code: int = args.func(args)  # each subcommand's handler returns the exit code
        return code
    except ConfigError as exc:  # a bad configuration is the user's to fix: no traceback
        print(f"compaction-proxy: {exc}", file=sys.stderr)
        return 2
