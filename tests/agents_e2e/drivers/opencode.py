"""opencode (npm ``opencode-ai``): ``opencode run``, the chat completions route (streamed).

A temporary config (``OPENCODE_CONFIG``) declares a provider on ``@ai-sdk/openai-compatible``
whose ``baseURL`` is the proxy, with a dummy key, and allows edits and shell commands. opencode
fetches that provider package from the npm registry on first use.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.agents_e2e.drivers.base import DUMMY_KEY, NPM_BIN, Driver, Launch


def launch(proxy: str, home: Path, task: str) -> Launch:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "e2e": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "e2e strict provider behind the proxy",
                "options": {"baseURL": f"{proxy}/v1", "apiKey": DUMMY_KEY},
                "models": {"e2e-model": {"name": "e2e model", "tool_call": True}},
            }
        },
        "model": "e2e/e2e-model",
        "small_model": "e2e/e2e-model",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "autoupdate": False,
        "share": "disabled",
    }
    path = home / "opencode.json"
    path.write_text(json.dumps(config, indent=2))
    argv = [str(NPM_BIN / "opencode"), "run", "--model", "e2e/e2e-model", task]
    env = {
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }
    return Launch(argv, env)


OPENCODE = Driver(
    name="opencode",
    dialect="/v1/chat/completions",
    executable=NPM_BIN / "opencode",
    version_argv=(str(NPM_BIN / "opencode"), "--version"),
    launch=launch,
    trigger_tokens=30000,
    keep_tokens=8000,
)
