"""Claude Code (npm ``@anthropic-ai/claude-code``): print mode, the Anthropic Messages route.

``ANTHROPIC_BASE_URL`` points it at the proxy and ``ANTHROPIC_API_KEY`` holds a dummy key
(print mode uses it without asking). Tools are allowed by name rather than with
``--dangerously-skip-permissions``, which Claude Code refuses as root. Two runs: Claude Code's
default model (which sends ``system`` turns inside ``messages`` under the
``mid-conversation-system`` beta) and ``claude-sonnet-4-5`` (which does not).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from tests.agents_e2e.drivers.base import DUMMY_KEY, NPM_BIN, Driver, Launch


def launch(proxy: str, home: Path, task: str, *, model: str | None) -> Launch:
    argv = [str(NPM_BIN / "claude"), "-p", task, "--output-format", "text", "--max-turns", "90"]
    argv += ["--allowedTools", "Bash,Read,Edit,Write,Glob,Grep,LS"]
    if model:
        argv += ["--model", model]
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


def claude(name: str, model: str | None) -> Driver:
    return Driver(
        name=name,
        dialect="/v1/messages",
        executable=NPM_BIN / "claude",
        version_argv=(str(NPM_BIN / "claude"), "--version"),
        launch=partial(launch, model=model),
        # Its fixed prompt is ~27k tokens: a trigger well above it, as the runs had.
        trigger_tokens=45000,
        keep_tokens=12000,
    )


CLAUDE = claude("claude-code", None)
CLAUDE_SONNET = claude("claude-code-sonnet", "claude-sonnet-4-5")
