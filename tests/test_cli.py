"""The command line as a user runs it: real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.support.config import config_yaml
from tests.support.mock_upstream import sse_chunks, sse_reply
from tests.support.servers import free_port, wait_for_port


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_check_config_prints_effective_settings_with_secrets_masked(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "upstream:\n  base_url: http://127.0.0.1:9/v1\n  api_key: ${MY_KEY}\n"
        "server:\n  port: ${PORT:-9090}\n"
    )
    result = run_cli("check-config", str(config), env={"MY_KEY": "sk-very-secret"})
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)
    assert effective["upstream"]["api_key"] == "***"
    assert effective["server"]["port"] == 9090
    assert effective["store"]["url"] == "memory://"
    assert "sk-very-secret" not in result.stdout + result.stderr


def test_check_config_shows_the_model_table_and_window_warnings(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text('models: {"acme*": {context_window: 4096, encoding: cl100k_base}}\n')
    result = run_cli("check-config", str(config))
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # stdout stays the settings as JSON
    rows = [line.split() for line in result.stderr.splitlines() if line.startswith("  ")]
    assert rows[0] == ["acme*", "4096", "cl100k_base", "config"]
    assert ["*claude*", "200000", "o200k_base", "built-in"] in rows
    assert ["*qwen*", "32768", "o200k_base", "built-in,", "/models", "first"] in rows
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    # The default prices its decisions (trigger.pays): the window is not its only trigger.
    assert len(warnings) == 1
    assert "policy 'default' compacts on context_fraction, and by price" in warnings[0]


def test_check_config_names_the_bad_key_and_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "server:\n  port: 8080\n  max_body_byte: 10\nupstream:\n  timeouts: {read: -1}\n"
    )
    result = run_cli("check-config", str(config))
    assert result.returncode == 2
    assert "server.max_body_byte" in result.stderr
    assert "line 3" in result.stderr
    assert "upstream.timeouts.read" in result.stderr
    assert "line 5" in result.stderr


def test_missing_env_reference_is_reported(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("upstream:\n  api_key: ${NOT_SET_ANYWHERE_42}\n")
    result = run_cli("check-config", str(config))
    assert result.returncode == 2
    assert "NOT_SET_ANYWHERE_42" in result.stderr
    assert "upstream.api_key" in result.stderr


def test_env_overrides_upstream(tmp_path: Path) -> None:
    result = run_cli(
        "check-config",
        os.devnull,
        env={"COMPACTION_PROXY_UPSTREAM_URL": "http://10.0.0.1:8000/v1"},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["upstream"]["base_url"] == "http://10.0.0.1:8000/v1"


def start_serve(tmp_path: Path, config_text: str) -> tuple[subprocess.Popen, int]:
    """`python -m proxy serve` as a user runs it, logs on a pipe; (process, port)."""
    port = free_port()
    config = tmp_path / "proxy.yaml"
    config.write_text(config_text)
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def test_serve_runs_and_drains_streams_on_sigterm(tmp_path: Path, mock) -> None:
    process, port = start_serve(
        tmp_path,
        config_yaml(provider=mock.url, server={"shutdown_grace_seconds": 10}),
    )
    try:
        wait_for_port(port, timeout=20)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}

        mock.push(sse_reply(sse_chunks(["one", "two", "three"], pause=0.4)))
        received: list[bytes] = []

        def stream() -> None:
            with httpx.stream(
                "POST",
                f"{base}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "secret words"}], "stream": True},
                headers={"authorization": "Bearer sk-should-not-be-logged"},
                timeout=20,
            ) as response:
                received.extend(response.iter_raw())

        reader = threading.Thread(target=stream)
        reader.start()
        time.sleep(0.3)  # the stream is under way
        process.send_signal(signal.SIGTERM)
        reader.join(timeout=20)
        assert b"".join(received).endswith(b"data: [DONE]\n\n")
        # uvicorn re-raises the signal once drained, so a supervisor sees a clean SIGTERM exit.
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    logs = process.stderr.read()
    process.stderr.close()
    access = [
        json.loads(line.split(" proxy.access ", 1)[1])
        for line in logs.splitlines()
        if " proxy.access " in line
    ]
    assert {"method": "POST", "path": "/v1/chat/completions", "status": 200}.items() <= access[
        -1
    ].items()
    assert access[-1]["bytes_out"] > 0
    assert "sk-should-not-be-logged" not in logs
    assert "secret words" not in logs


def test_access_log_can_be_switched_off(tmp_path: Path, mock) -> None:
    process, port = start_serve(
        tmp_path, config_yaml(provider=mock.url, server={"access_log": False})
    )
    try:
        wait_for_port(port, timeout=20)
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=20,
        )
        assert response.status_code == 200
    finally:
        process.terminate()  # graceful: the request's handler has finished before the exit
        process.wait(timeout=20)
    logs = process.stderr.read()
    process.stderr.close()
    assert "Application startup complete" in logs  # the other logs still come out
    assert " proxy.access " not in logs


def test_serve_bounds_slow_clients(tmp_path: Path, mock) -> None:
    """The limits on slow and oversized clients hold under `serve` itself (the wire tests share
    its options)."""
    import socket

    process, port = start_serve(
        tmp_path,
        config_yaml(
            provider=mock.url, server={"header_timeout_seconds": 1, "body_idle_timeout_seconds": 1}
        ),
    )
    try:
        wait_for_port(port, timeout=20)
        answers = []
        for request in (b"", b"POST /v1/files HTTP/1.1\r\nhost: x\r\ncontent-length: 9\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(request)  # a silent client, then a stalled body
                answers.append(sock.recv(200))
        assert [a[:12] for a in answers] == [b"HTTP/1.1 408"] * 2
        assert mock.received == []
    finally:
        process.terminate()
        process.wait(timeout=20)
    process.stderr.close()


def test_a_bad_encryption_key_stops_check_config_and_serve(tmp_path: Path) -> None:
    config = tmp_path / "keys.yaml"
    config.write_text('store:\n  encryption_keys: ["k1:dG9vc2hvcnQhIQ=="]\n')
    for command in (["check-config", str(config)], ["serve", "--config", str(config)]):
        result = run_cli(*command)
        assert result.returncode == 2, result.stderr
        assert "store.encryption_keys" in result.stderr
        assert "Traceback" not in result.stderr
        assert "dG9vc2hvcnQhIQ" not in result.stderr
