"""Codex CLI (npm ``@openai/codex``): ``codex exec``, the Responses route.

A temporary ``CODEX_HOME`` holds a ``config.toml`` whose ``model_providers`` entry points at the
proxy (``wire_api = "responses"``, the dummy key in ``env_key``). The sandbox is bypassed: the
scratch project is a throwaway copy, and Linux sandboxing may be unavailable in a container.
"""

from __future__ import annotations

from pathlib import Path

from tests.agents_e2e.drivers.base import DUMMY_KEY, NPM_BIN, Driver, Launch

CONFIG = """\
model = "gpt-5-codex"
model_provider = "e2e"
model_reasoning_effort = "low"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.e2e]
name = "e2e strict provider behind the proxy"
base_url = "{proxy}/v1"
env_key = "E2E_API_KEY"
wire_api = "responses"
"""


def launch(proxy: str, home: Path, task: str) -> Launch:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(CONFIG.format(proxy=proxy))
    argv = [str(NPM_BIN / "codex"), "exec", "--skip-git-repo-check"]
    argv += ["--dangerously-bypass-approvals-and-sandbox", task]
    return Launch(argv, {"CODEX_HOME": str(codex_home), "E2E_API_KEY": DUMMY_KEY})


CODEX = Driver(
    name="codex",
    dialect="/v1/responses",
    executable=NPM_BIN / "codex",
    version_argv=(str(NPM_BIN / "codex"), "--version"),
    launch=launch,
    trigger_tokens=30000,
    keep_tokens=8000,
)
