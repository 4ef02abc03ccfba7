"""The servers of the proxy benchmark: the mock provider, nginx, LiteLLM and ours.

Each is installed when missing (Debian packages with apt-get; Python packages into .bench/,
which git ignores, never into the project's dependencies), configured in the run's temporary
directory to pass everything to the mock, started on a free loopback port with N workers, and
waited for until it answers a chat completion.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.bench import wire
from tests.support.processes import Server
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / ".bench"
EXTRA_DIR = BENCH_DIR / "extra"  # httpx-aiohttp, for the third candidate only
TOOLS_DIR = BENCH_DIR / "tools"  # py-spy
LITELLM_VENV = BENCH_DIR / "litellm"
# For the benchmark's helpers (the mock, bench_long's minimal relays): glibc keeps their heap.
# They never hold a whole large body, so after each request glibc handed its heap top back to
# the system and faulted it in again on the next: with a 632 KB body, ~480 page faults a
# request in the mock and ~190 in the minimal relay, which doubled the relay's added time and
# loaded the machine under every lane. A proxy is started without it, as users run it: it holds
# each body whole, and glibc then keeps its heap by itself (0-6 page faults a request, measured).
KEPT_HEAP = {
    "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=4194304"
}
TIKTOKEN_DIR = REPO.parent / "shared" / "tiktoken"

# Every scenario of the mock (tests/bench/raw_upstream.py) is one model name.
MODELS = (
    "bench-small",
    "bench-stream",
    "bench-gap",
    "bench-hang-headers",
    "bench-hang-first",
    "bench-hang-mid",
)
CANDIDATES = ("aiohttp", "httpx", "httpx-aiohttp")


class Unavailable(Exception):
    """A contender or tool cannot run here; the message says why."""


@dataclass
class Target:
    """Something the client can send requests to."""

    name: str
    port: int
    server: Server


def _run(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{' '.join(argv[:4])}: {exc}") from exc
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise Unavailable(f"{' '.join(argv[:4])} exited {done.returncode}: {tail}")


def ensure_debian(binary: str, package: str, say: object = print) -> str:
    """The binary's path, installing Debian's package when it is missing."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found:
        return found
    say(f"installing {package} with apt-get")  # type: ignore[operator]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], timeout=300, env=env)
    _run(["apt-get", "install", "-y", "-qq", package], timeout=600, env=env)
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if not found:
        raise Unavailable(f"{package} installed but {binary} is not on PATH")
    return found


def ensure_pip_target(package: str, target: Path, marker: Path, say: object = print) -> None:
    """``pip install --no-deps --target`` into .bench/, once (dependencies are already ours)."""
    if marker.exists():
        return
    say(f"installing {package} into {target.relative_to(REPO)}")  # type: ignore[operator]
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            package,
        ],
        timeout=600,
    )


def ensure_litellm(say: object = print) -> Path:
    """The LiteLLM proxy's executable, in a virtualenv of its own under .bench/."""
    python = LITELLM_VENV / "bin" / "python"
    executable = LITELLM_VENV / "bin" / "litellm"
    if not executable.exists():
        say("installing litellm[proxy] into .bench/litellm (takes a minute)")  # type: ignore[operator]
        _run([sys.executable, "-m", "venv", str(LITELLM_VENV)], timeout=120)
        _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], timeout=300)
        _run([str(python), "-m", "pip", "install", "-q", "litellm[proxy]"], timeout=900)
    if not executable.exists():
        raise Unavailable("litellm installed but its executable is missing")
    return executable


def version_of(argv: list[str]) -> str:
    """The first version number a command prints (to stdout or stderr)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "?"
    match = re.search(r"\d+(?:\.\d+)+", done.stdout + done.stderr)
    return match.group(0) if match else "?"


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment minus anything that would point a server elsewhere than asked."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMPACTION_PROXY_", "VIRTUAL_ENV", "PYTHONPATH", "OTEL_"))
    }
    env.update(extra)
    return env


def wait_ready(target: Target, key: str, *, timeout: float = 90.0) -> None:
    """Until the target answers a small chat completion with 200 (workers may start late)."""
    request = wire.post(target.port, "/v1/chat/completions", chat_body("bench-small"), key)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not target.server.alive():
            break
        try:
            with wire.Connection(target.port, timeout=10) as conn:
                reply = conn.exchange(request, keep_body=True)
            if reply.status == 200:
                return
            last = f"status {reply.status}: {reply.body[:200]!r}"
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.25)
    tail = target.server.log_tail()
    target.server.stop()
    raise Unavailable(f"{target.name} did not become ready ({last}); its log ends:\n{tail}")


def chat_body(model: str, content: str = "Hello", *, stream: bool = False) -> bytes:
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def start_mock(tmp: Path, *, hang_seconds: float) -> Target:
    port = free_port()
    argv = [sys.executable, "-m", "tests.bench.raw_upstream", "--port", str(port)]
    argv += ["--hang-seconds", str(hang_seconds)]
    server = Server("mock", argv, log=tmp / "mock.log", env=_clean_env(**KEPT_HEAP), cwd=REPO)
    return Target("direct", port, server)


def start_nginx(tmp: Path, nginx: str, mock_port: int, workers: int) -> Target:
    port = free_port()
    home = tmp / f"nginx-{workers}"
    home.mkdir()
    home.chmod(0o755)  # nginx's workers run as an unprivileged user
    conf = home / "nginx.conf"
    conf.write_text(
        f"""daemon off;
worker_processes {workers};
pid {home}/nginx.pid;
error_log {home}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log {home}/access.log;
    client_body_temp_path {home}/client_body;
    proxy_temp_path {home}/proxy;
    fastcgi_temp_path {home}/fastcgi;
    uwsgi_temp_path {home}/uwsgi;
    scgi_temp_path {home}/scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;  # a 400 KB conversation stays in memory
    keepalive_requests 1000000;
    upstream mock {{
        server 127.0.0.1:{mock_port};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;  # SSE chunks go out as they arrive
        }}
    }}
}}
"""
    )
    argv = [nginx, "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")]
    # SIGQUIT: nginx's graceful stop. The pid file names the master we started.
    server = Server("nginx", argv, log=home / "stderr.log", stop_signal=signal.SIGQUIT)
    return Target("nginx", port, server)


def nginx_pid_matches(target: Target) -> bool:
    pid_file = Path(target.server.log.parent / "nginx.pid")
    return pid_file.exists() and pid_file.read_text().strip() == str(target.server.pid)


def start_litellm(tmp: Path, litellm: Path, mock_port: int, workers: int, key: str) -> Target:
    port = free_port()
    config = tmp / f"litellm-{workers}.yaml"
    entries = "".join(
        f"""  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: http://127.0.0.1:{mock_port}/v1
      api_key: sk-mock
"""
        for model in MODELS
    )
    config.write_text(f"model_list:\n{entries}general_settings:\n  master_key: {key}\n")
    argv = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", str(workers)]
    # No internet here: use the model cost map shipped in the package instead of fetching it.
    env = _clean_env(LITELLM_LOCAL_MODEL_COST_MAP="True")
    server = Server("litellm", argv, log=tmp / f"litellm-{workers}.log", env=env, cwd=tmp)
    return Target("litellm", port, server)


def start_ours(
    tmp: Path,
    candidate: str,
    mock_port: int,
    workers: int,
    *,
    source: Path = REPO,
    label: str = "ours",
    env: dict[str, str] | None = None,
) -> Target:
    """The proxy from ``source`` (a checkout of this repo) with the given upstream client, named
    ``label[candidate]`` (``before[...]``: a baseline checkout measured in the same run);
    ``env``: more environment for it (``OTEL_*``: tests/bench/bench_tracing.py)."""
    port = free_port()
    transport = "httpx" if candidate.startswith("httpx") else "aiohttp"
    config = tmp / f"{label}-{candidate}-{workers}.yaml"
    config.write_text(
        f"server: {{host: 127.0.0.1, port: {port}, workers: {workers}}}\n"
        f'upstream: {{base_url: "http://127.0.0.1:{mock_port}/v1", transport: {transport}}}\n'
    )
    if candidate == "httpx-aiohttp":
        argv = [sys.executable, "-m", "tests.bench.httpx_aiohttp_app"]
    else:
        argv = [sys.executable, "-m", "proxy", "serve"]
    argv += ["--config", str(config), "--port", str(port), "--workers", str(workers)]
    paths = [str(source), str(REPO), str(EXTRA_DIR)]
    env = _clean_env(PYTHONPATH=os.pathsep.join(paths), **(env or {}))
    if TIKTOKEN_DIR.is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_DIR)  # no downloads here
    log = tmp / f"{label}-{candidate}-{workers}.log"
    server = Server(f"{label}[{candidate}]", argv, log=log, env=env, cwd=source)
    return Target(f"{label}[{candidate}]", port, server)
