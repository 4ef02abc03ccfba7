"""The image's start command, run on the host: deploy/docker-entrypoint.sh, then SIGTERM.

The container runs ``tini -e 143 -- docker-entrypoint.sh serve``. tini only forwards signals and
maps the status, so running the entrypoint directly checks the rest: env becomes flags, the script
execs the proxy (so the signal reaches it), /healthz and /readyz answer, the HEALTHCHECK script
passes, a stream in flight finishes after SIGTERM, and the proxy stops cleanly. When a ``tini``
binary is on PATH (Debian's package), one test runs the image's exact command line under it.

A clean stop of one uvicorn process ends with uvicorn re-raising SIGTERM after the drain, so its
status is "killed by SIGTERM" (-15 here, 143 in a shell); the drain is proven by uvicorn's
"Application shutdown complete." line, and under tini by status 0.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

from tests.deploy.files import DEPLOY
from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream, sse_chunks, sse_reply
from tests.support.servers import free_port, wait_for_port

ENTRYPOINT = DEPLOY / "docker-entrypoint.sh"
DRAINED = "Application shutdown complete."
TINI = shutil.which("tini") or shutil.which("tini-static")
HEALTHCHECK = DEPLOY / "healthcheck.py"
BAKE = DEPLOY / "bake_tiktoken.py"


def proxy_env(config: Path, port: int, **extra: str) -> dict[str, str]:
    """The image's environment, with the host's venv first on PATH as /opt/venv/bin is there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTION_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        COMPACTION_PROXY_CONFIG=str(config),
        COMPACTION_PROXY_HOST="127.0.0.1",
        COMPACTION_PROXY_PORT=str(port),
        COMPACTION_TENANT_SECRET="s" * 32,
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def write_config(tmp_path: Path, provider: str, *, grace: float = 5) -> Path:
    config = tmp_path / "proxy.yaml"
    text = config_yaml(
        provider=provider,
        server={"shutdown_grace_seconds": grace, "log_level": "info"},
        upstream={"api_key": "sk-upstream"},
        store={"url": "memory://", "tenant_secret": "${COMPACTION_TENANT_SECRET}"},
    )
    config.write_text(text, encoding="utf-8")
    return config


class Entrypoint:
    """deploy/docker-entrypoint.sh as a child process, stopped by its own pid."""

    def __init__(self, env: dict[str, str], *args: str, init: list[str] | None = None) -> None:
        self.port = int(env["COMPACTION_PROXY_PORT"])
        self.env = env
        self.proc = subprocess.Popen(
            [*(init or []), str(ENTRYPOINT), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                wait_for_port(self.port, timeout=0.2)
                return
            except TimeoutError:
                continue
        self.proc.kill()
        out, err = self.proc.communicate(timeout=10)
        pytest.fail(f"the entrypoint did not start the proxy:\n{out}{err}")

    def terminate(self, *, timeout: float = 20) -> tuple[int, str]:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            pytest.fail(f"no exit {timeout}s after SIGTERM:\n{err}")
        return self.proc.returncode, err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=10)


def get_json(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, json.loads(response.read())


def probe_then_stop(proxy: Entrypoint, path: str) -> tuple[int, str]:
    """Wait until it listens, expect 200 on ``path``, SIGTERM it: (exit status, stderr)."""
    try:
        proxy.wait_ready()
        assert get_json(f"{proxy.url}{path}")[0] == 200
    finally:
        code, err = proxy.terminate()
        proxy.close()
    return code, err


@pytest.mark.usefixtures("tiktoken_files")
def test_serves_probes_and_exits_cleanly_on_sigterm(tmp_path: Path, mock: MockUpstream) -> None:
    port = free_port()
    env = proxy_env(write_config(tmp_path, mock.url), port)
    proxy = Entrypoint(env)
    try:
        proxy.wait_ready()
        # exec, not a child: the pid tini signals is the proxy itself.
        cmdline = Path(f"/proc/{proxy.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert any(part.endswith(b"compaction-proxy") for part in cmdline), cmdline
        assert b"--port" in cmdline and str(port).encode() in cmdline

        assert get_json(f"{proxy.url}/healthz") == (200, {"status": "ok"})
        status, ready = get_json(f"{proxy.url}/readyz")
        assert status == 200 and ready["status"] == "ready"
        assert ready["store"]["backend"] == "memory"

        check = subprocess.run(
            [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, timeout=10
        )
        assert check.returncode == 0, check.stderr
    finally:
        code, err = proxy.terminate()
        proxy.close()
    assert code in (0, -signal.SIGTERM), err
    assert DRAINED in err
    assert "Traceback" not in err

    # The same healthcheck fails once nothing listens.
    check = subprocess.run(
        [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, timeout=10
    )
    assert check.returncode == 1


@pytest.mark.usefixtures("tiktoken_files")
def test_sigterm_lets_a_stream_in_flight_finish(tmp_path: Path, mock: MockUpstream) -> None:
    pieces = [f"part{i} " for i in range(6)]
    mock.push(sse_reply(sse_chunks(pieces, pause=0.25)))  # about 1.5 s of streaming
    env = proxy_env(write_config(tmp_path, mock.url), free_port())
    proxy = Entrypoint(env)
    received: list[bytes] = []
    first_chunk = threading.Event()

    def stream() -> None:
        body = {
            "model": "gpt-4o-mini",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with (
            httpx.Client(timeout=20) as client,
            client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as response,
        ):
            for chunk in response.iter_raw():
                received.append(chunk)
                first_chunk.set()

    try:
        proxy.wait_ready()
        reader = threading.Thread(target=stream)
        reader.start()
        assert first_chunk.wait(10), "no stream started"
        started = time.monotonic()
        code, err = proxy.terminate()
        reader.join(10)
    finally:
        proxy.close()
    assert code in (0, -signal.SIGTERM), err
    assert DRAINED in err
    text = b"".join(received).decode()
    assert all(piece in text for piece in pieces), text
    assert text.rstrip().endswith("data: [DONE]")
    assert time.monotonic() - started >= 1.0  # it waited for the stream, not for nothing


@pytest.mark.usefixtures("tiktoken_files")
def test_several_workers_drain_and_exit_cleanly(tmp_path: Path, mock: MockUpstream) -> None:
    env = proxy_env(write_config(tmp_path, mock.url), free_port(), COMPACTION_PROXY_WORKERS="2")
    code, err = probe_then_stop(Entrypoint(env), "/readyz")
    assert code == 0, err  # the supervisor of several workers exits 0 once they have drained
    assert err.count(DRAINED) == 2


@pytest.mark.skipif(TINI is None, reason="no tini on PATH (Debian: apt-get install tini)")
@pytest.mark.usefixtures("tiktoken_files")
def test_under_tini_a_clean_stop_exits_zero(tmp_path: Path, mock: MockUpstream) -> None:
    assert TINI is not None
    env = proxy_env(write_config(tmp_path, mock.url), free_port())
    # The image's ENTRYPOINT; -s because tini is not PID 1 here (a subreaper instead).
    proxy = Entrypoint(env, "serve", init=[TINI, "-s", "-e", "143", "--"])
    code, err = probe_then_stop(proxy, "/healthz")
    assert code == 0, err
    assert DRAINED in err


def test_a_missing_config_file_stops_with_a_clear_error(tmp_path: Path) -> None:
    env = proxy_env(tmp_path / "absent.yaml", free_port())
    result = subprocess.run([str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "cannot read config file" in result.stderr


def test_other_commands_run_as_given(tmp_path: Path) -> None:
    env = proxy_env(tmp_path / "absent.yaml", free_port())
    result = subprocess.run(
        [str(ENTRYPOINT), "sh", "-c", "echo $COMPACTION_PROXY_PORT"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout.strip() == env["COMPACTION_PROXY_PORT"]


def test_bake_tiktoken_verifies_the_files_offline(tiktoken_files: Path, tmp_path: Path) -> None:
    # What the Dockerfile's builder does with the `tiktoken` build context.
    cache = tmp_path / "tiktoken"
    shutil.copytree(tiktoken_files, cache)
    for file in cache.iterdir():
        file.chmod(0o644)
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [sys.executable, str(BAKE)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "none downloaded" in result.stdout
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        p.name for p in tiktoken_files.iterdir() if p.name != "README.md"
    )


def test_bake_tiktoken_refuses_a_file_that_does_not_match_its_hash(
    tiktoken_files: Path, tmp_path: Path
) -> None:
    # An offline folder with a damaged file: tiktoken tries to download it again, which fails
    # here (no internet), and the build stops instead of shipping it.
    cache = tmp_path / "tiktoken"
    shutil.copytree(tiktoken_files, cache)
    damaged = cache / "0ea1e91bbb3a60f729a8dc8f777fd2fc07cd8df4"  # r50k_base
    damaged.chmod(0o644)
    damaged.write_bytes(b"not the BPE file")
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache)}
    result = subprocess.run(
        [sys.executable, str(BAKE)], env=env, capture_output=True, text=True, timeout=120
    )
    if result.returncode == 0:  # a machine with internet downloaded and verified it again
        assert "downloaded r50k_base" in result.stdout
    else:
        assert result.returncode == 1
        assert "r50k_base" in result.stderr
