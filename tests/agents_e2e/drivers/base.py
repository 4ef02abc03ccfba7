"""What every driver says about its agent, and the environment every agent starts from."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
AGENTS = REPO / ".e2e-agents"  # installed by `make e2e-agents`, ignored by git
NPM_BIN = AGENTS / "npm" / "node_modules" / ".bin"
VENV_BIN = AGENTS / "venv" / "bin"
DUMMY_KEY = "dummy-e2e-key"  # no real key exists here; the proxy and provider ignore it


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Driver:
    name: str
    dialect: str  # the route it speaks: /v1/messages, /v1/responses, /v1/chat/completions
    executable: Path
    version_argv: tuple[str, ...]  # a command that prints the version last
    launch: Callable[[str, Path, str], Launch]  # (proxy URL, home folder, task) -> how to start
    trigger_tokens: int  # the run's low trigger: above the agent's fixed prompt
    keep_tokens: int

    def installed(self) -> bool:
        return self.executable.exists()

    def version(self, env: dict[str, str]) -> str:
        done = subprocess.run(
            list(self.version_argv),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        return (
            (done.stdout or done.stderr).strip().splitlines()[-1] if done.returncode == 0 else "?"
        )


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: nothing of the caller's (no real key reaches an agent), a home of
    its own, no colour, and every telemetry and update switch the agents know turned off."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
        "DO_NOT_TRACK": "1",
    }
