"""``compaction-proxy wrap claude|codex|opencode [-- agent args]``: run a coding agent through the
proxy with nothing else to set.

Starts ``compaction-proxy serve`` on a free loopback port (or uses the one ``--proxy-url``
names), points the agent at it (``proxy.tools.agent_launch``), runs it in the foreground, and
when it exits stops the proxy it started and prints what the session saved, read from the
proxy's ``/metrics`` before and after. The agent's own session header names its conversation
(``conversation.header``), so each run is one conversation.

The proxy runs in a session of its own: Ctrl-C in the agent (which interrupts a turn) reaches
the agent only, not the proxy under it. Its log goes to a file, not over the agent's screen.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from proxy.errors import ConfigError
from proxy.tools.agent_launch import AGENTS, default_config, launch
from proxy.tools.session_report import read_totals, report

_START_SECONDS = 30.0
_STOP_SECONDS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("agent", choices=AGENTS, help="the coding agent to run")
    parser.add_argument(
        "--config",
        help="the proxy's YAML config (default: the agent's own provider, every other key at "
        "its default)",
    )
    parser.add_argument(
        "--proxy-url",
        help="use the proxy already running here (e.g. http://127.0.0.1:8080) instead of "
        "starting one",
    )
    parser.add_argument("--agent-command", help="the agent's program (default: its name on PATH)")
    parser.add_argument(
        "--log", help="where the started proxy writes its log (default: a temporary file)"
    )
    # What follows "--" is the agent's, taken off before parsing (``split_agent_args``):
    # argparse's subcommands do not pass "--" through cleanly.
    parser.set_defaults(agent_args=[])
    parser.epilog = "Arguments after -- go to the agent: compaction-proxy wrap claude -- -p 'hi'"


def split_agent_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``wrap``'s own arguments and the agent's (everything after the first ``--``)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def command(args: argparse.Namespace) -> int:
    agent_args = list(args.agent_args)
    program = args.agent_command or args.agent
    if shutil.which(program) is None:
        raise ConfigError(f"{program} not found on PATH (--agent-command names another program)")
    with _proxy(args) as url:
        before = read_totals(url)
        run = launch(args.agent, url, agent_args, executable=program, environ=os.environ)
        code = _run_agent(run.argv, {**os.environ, **run.env})
        after = read_totals(url)
    print(report(args.agent, url, before, after), file=sys.stderr)
    return code


@contextlib.contextmanager
def _proxy(args: argparse.Namespace) -> Iterator[str]:
    """The proxy's root URL: ``--proxy-url``, or one started here and stopped on the way out."""
    if args.proxy_url:
        _check_reachable(args.proxy_url.rstrip("/"))
        yield args.proxy_url.rstrip("/")
        return
    with tempfile.TemporaryDirectory(prefix="compaction-proxy-wrap-") as scratch:
        config = args.config
        if config is None:
            config = str(Path(scratch) / "proxy.yaml")
            Path(config).write_text(yaml.safe_dump(default_config(args.agent)), encoding="utf-8")
        log_path = args.log or str(Path(scratch) / "proxy.log")
        port = _free_port()
        command = [sys.executable, "-m", "proxy", "serve", "--config", config]
        command += ["--host", "127.0.0.1", "--port", str(port)]
        with open(log_path, "ab") as log:
            server = subprocess.Popen(
                command, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_serving(url, server, log_path)
            yield url
        finally:
            _stop(server)


def _run_agent(argv: list[str], env: dict[str, str]) -> int:
    """Run the agent in the foreground; while it runs, Ctrl-C is the agent's to handle. Told to
    stop (SIGTERM, or SIGHUP: the terminal closed), wrap stops the agent and then the proxy,
    which sits in a session of its own and would otherwise outlive both."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # subprocess.call kills the agent on the way out

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, stop),
        signal.SIGHUP: signal.signal(signal.SIGHUP, stop),
    }
    try:
        return subprocess.call(argv, env=env)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) for AF_INET; typeshed says Any
        return port


def _check_reachable(url: str) -> None:
    try:
        httpx.get(f"{url}/healthz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise ConfigError(f"no proxy answers at {url}/healthz: {exc}") from exc


def _wait_until_serving(url: str, server: subprocess.Popen[bytes], log_path: str) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = Path(log_path).read_text(encoding="utf-8", errors="replace")[-2000:]
            raise ConfigError(f"the proxy exited before serving (log {log_path}):\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise ConfigError(f"the proxy did not answer on {url} within {_START_SECONDS:.0f}s")


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the proxy drains and exits), then SIGKILL if it does not within the bound."""
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(timeout=_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
