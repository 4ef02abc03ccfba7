"""``compaction-proxy wrap``, run as a user runs it, with a fake agent first on PATH: a small
script that reads the base URL the way the real agent does and makes its requests, through the
proxy, to a mock provider."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from proxy.config.settings import parse_settings
from proxy.tools.agent_launch import default_config
from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream

# One script for the three agents: it reads its base URL as the real one does (see
# proxy/tools/agent_launch.py), then sends a growing conversation of six requests on the
# agent's route with the agent's session header, writes down its arguments, and exits 3.
FAKE_AGENT = r"""
import json, os, re, sys, time, urllib.request

name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
if name == "claude":
    base, route, header = os.environ["ANTHROPIC_BASE_URL"] + "/v1", "/messages", "X-Claude-Code-Session-Id"
elif name == "codex":
    spec = [a for a in args if a.startswith("model_providers.compaction_proxy=")][0]
    assert "model_provider=compaction_proxy" in args and "supports_websockets=false" in spec
    base, route, header = re.search(r'base_url="([^"]+)"', spec).group(1), "/responses", "thread-id"
else:
    config = json.loads(os.environ["OPENCODE_CONFIG_CONTENT"])
    base, route, header = config["provider"]["openai"]["options"]["baseURL"], "/chat/completions", "x-session-id"
with open(os.environ["FAKE_AGENT_LOG"], "w") as log:
    json.dump(args, log)
if os.environ.get("FAKE_AGENT_HANG"):  # a session the user ends from outside
    with open(os.environ["FAKE_AGENT_HANG"], "w") as out:
        json.dump({"pid": os.getpid(), "base": base}, out)
    time.sleep(60)
history = []
for turn in range(6):
    history.append({"role": "user", "content": f"step {turn}: " + "read the file again " * 40})
    key = "input" if route == "/responses" else "messages"
    body = {"model": "claude-sonnet-4-5" if name == "claude" else "gpt-4o", key: history}
    if name == "claude":
        body["max_tokens"] = 64
    request = urllib.request.Request(
        base + route, data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-fake",
                 "x-api-key": "sk-fake", header: f"{name}-session-1"},
    )
    with urllib.request.urlopen(request) as response:
        response.read()
    history.append({"role": "assistant", "content": f"done {turn}"})
sys.exit(3)
"""

ROUTES = {"claude": "/v1/messages", "codex": "/v1/responses", "opencode": "/v1/chat/completions"}
SESSION_HEADERS = {
    "claude": "x-claude-code-session-id",
    "codex": "thread-id",
    "opencode": "x-session-id",
}
# Old turns dropped past four messages, the newest kept: no summarizer, so savings show at once.
DROPPING = {
    "strategy": "neuralyze",
    "mode": "inline",
    "trigger": {"messages": 4, "context_fraction": 0},
    "keep": {"interactions": 1},
}


@pytest.fixture
def agents_on_path(tmp_path: Path) -> dict[str, str]:
    """The environment to run ``wrap`` in: the fake agents first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ROUTES:
        script = folder / name
        script.write_text(f"#!{sys.executable}\n{FAKE_AGENT}", encoding="utf-8")
        script.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "FAKE_AGENT_LOG": str(tmp_path / "agent-args.json"),
    }


def wrap(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "wrap", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def proxy_url_in(report: str) -> str:
    line = next(line for line in report.splitlines() if " session through " in line)
    return line.rsplit(" ", 1)[1]


@pytest.mark.parametrize("agent", sorted(ROUTES))
def test_wrap_runs_the_agent_through_a_proxy_it_starts_and_stops(
    agent: str, mock: MockUpstream, agents_on_path: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        config_yaml(
            provider=mock.url,
            upstream={"anthropic_base_url": mock.url},
            policies={"default": DROPPING},
        )
    )
    result = wrap(agent, "--config", str(config), "--", "-p", "fix the tests", env=agents_on_path)

    assert result.returncode == 3, result.stderr  # the agent's own exit status
    # The agent got the user's arguments, after whatever wrap adds to point it at the proxy.
    args = json.loads(Path(agents_on_path["FAKE_AGENT_LOG"]).read_text())
    assert args[-2:] == ["-p", "fix the tests"]
    # Every request reached the provider through the proxy, on the agent's route, with its
    # session header, and the later ones compacted: that session was one conversation.
    sent = [r for r in mock.received if r.path == ROUTES[agent]]
    assert len(sent) == 6
    assert all(r.headers[SESSION_HEADERS[agent]] == f"{agent}-session-1" for r in sent)
    key = "input" if agent == "codex" else "messages"
    assert len(sent[-1].json()[key]) < 11
    # What the session saved, printed once the agent exited.
    report = result.stderr
    assert "requests: 6" in report and "compacted: " in report
    saved = int(report.split(" saved")[0].rsplit(" ", 1)[1])
    assert saved > 0
    # The proxy it started is stopped.
    port = int(proxy_url_in(report).rsplit(":", 1)[1])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_wrap_uses_a_running_proxy_and_leaves_it_running(
    mock: MockUpstream, start_proxy, agents_on_path: dict[str, str]
) -> None:
    from tests.support.config import config

    server = start_proxy(config(provider=mock.url, policies={"default": DROPPING}))
    result = wrap("opencode", "--proxy-url", server.url, env=agents_on_path)

    assert result.returncode == 3, result.stderr
    assert proxy_url_in(result.stderr) == server.url
    assert len(mock.chat_requests()) == 6
    with socket.create_connection(("127.0.0.1", server.port), timeout=1):
        pass  # still serving


def test_wrap_says_so_when_the_agent_is_not_installed(agents_on_path: dict[str, str]) -> None:
    result = wrap("claude", "--agent-command", "no-such-agent-here", env=agents_on_path)
    assert result.returncode == 2
    assert "no-such-agent-here not found on PATH" in result.stderr


def test_wrap_told_to_stop_stops_the_agent_and_the_proxy(
    agents_on_path: dict[str, str], tmp_path: Path
) -> None:
    started = tmp_path / "agent.json"
    env = {**agents_on_path, "FAKE_AGENT_HANG": str(started)}
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "proxy", "wrap", "claude"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline and wrapper.poll() is None
            time.sleep(0.05)
        agent = json.loads(started.read_text())
        wrapper.send_signal(signal.SIGTERM)
        assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(agent["pid"], 0)
    port = int(agent["base"].rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.mark.parametrize("agent", sorted(ROUTES))
def test_the_started_proxys_own_config_is_valid_and_keeps_the_agents_provider(agent: str) -> None:
    """Without --config, wrap writes one: the agent's own provider, the rest at the defaults."""
    settings = parse_settings(yaml.safe_dump(default_config(agent)), environ={})
    expected = "https://api.anthropic.com/v1" if agent == "claude" else "https://api.openai.com/v1"
    assert str(settings.upstream.base_url).rstrip("/") == expected
    assert str(settings.upstream.anthropic_base_url).rstrip("/") == "https://api.anthropic.com"
