"""Claude Code (npm ``@anthropic-ai/claude-code``): print mode, the Anthropic Messages route.

``ANTHROPIC_BASE_URL`` points it at the proxy and ``ANTHROPIC_API_KEY`` holds a dummy key
(print mode uses it without asking). Tools are allowed by name rather than with
``--dangerously-skip-permissions``, which Claude Code refuses as root. ``CLAUDE_MODEL`` picks
the model (default: Claude Code's own default).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.agents_e2e.drivers.base import DUMMY_KEY, NPM_BIN, Driver, Launch


def launch(proxy: str, home: Path, task: str) -> Launch:
    argv = [str(NPM_BIN / "claude"), "-p", task, "--output-format", "text", "--max-turns", "90"]
    argv += ["--allowedTools", "Bash,Read,Edit,Write,Glob,Grep,LS"]
    if os.environ.get("CLAUDE_MODEL"):
        argv += ["--model", os.environ["CLAUDE_MODEL"]]
    env = {
        "ANTHROPIC_BASE_URL": proxy,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    }
    return Launch(argv, env)


CLAUDE = Driver(
    name="claude-code",
    dialect="/v1/messages",
    executable=NPM_BIN / "claude",
    version_argv=(str(NPM_BIN / "claude"), "--version"),
    launch=launch,
    trigger_tokens=45000,
    keep_tokens=12000,
)
