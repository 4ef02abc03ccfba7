"""The scripted session the strict provider drives every agent through.

Forty rounds of what a coding agent does in a small project: list it, read files (big enough
that compaction has work), grep, run the tests (they fail), read and edit the module, run the
tests again (they pass), a few more reads, then finish. Each round is one shell command run
through whatever shell tool the agent offers (Claude Code ``Bash``, Codex ``shell_command`` or
``exec_command``, opencode ``bash``, mini-swe-agent ``bash``), so the agent runs it for real in
its scratch copy of the project.

The provider is stateless: the step to take is read from the request. Each command echoes a
marker with its step number first, and the newest tool round is always sent verbatim (a cut
never falls inside it), so the highest marker among the tool results names the last step done.
Every sixth step, when the proxy offers its recall tool and a stub names a recall id, the model
recalls that output once before going on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ROUNDS = 40
MARKER = "== e2e step {} =="
_MARKER = re.compile(r"== e2e step (\d+) ==")
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's way to finish
RECALL_TOOL = "context_recall"
_RECALL_ID = re.compile(r"recall id ([a-z0-9]+)")
SHELLS = ("Bash", "bash", "shell_command", "exec_command", "shell")
TASK = (
    "The unit tests of this small project fail. Look around the project, find the bug in "
    "calc.py, fix it, and run the tests until they pass."
)
FINAL = "All done: calc.add now adds, and the tests pass."


@dataclass
class Turn:
    """What the script needs from a request, whatever its dialect."""

    tools: dict[str, dict[str, Any]]  # name -> JSON schema of its arguments
    observations: list[str]  # tool results and user texts, oldest first
    last_call: str = ""  # the name of the tool the newest assistant turn called
    recall_ids: list[str] = field(default_factory=list)


@dataclass
class Action:
    """The model's next move: a tool call (``name`` and ``arguments``) or a final text."""

    text: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    step: int = 0


def commands(files: list[str]) -> list[str]:
    """The forty shell commands, for a project whose package holds ``files`` (pkg/NAME)."""
    reads = [f"cat pkg/{name}" for name in files]
    greps = [
        "grep -rn 'def ' pkg | head -120",
        "grep -rn '^import\\|^from' pkg | head -80",
        "grep -rn 'class ' pkg | head -60",
        "grep -rn 'return' pkg | head -100",
        "grep -rn 'add' . | head -40",
    ]
    explore = ["ls -la", "find . -name '*.py' | sort", "cat README.md", "wc -l pkg/*.py calc.py"]
    middle: list[str] = []
    while reads or greps:
        middle += reads[:3] + greps[:1]
        reads, greps = reads[3:], greps[1:]
    fix = [
        "python3 -m unittest -v 2>&1 | tail -30",
        "cat calc.py test_calc.py",
        "sed -i 's/return a - b/return a + b/' calc.py && cat calc.py",
        "python3 -m unittest -v 2>&1 | tail -30",
    ]
    # After the fix: what an agent does to check its work, rereading files it read before (their
    # first reads may be stubs or summarized by now).
    check = [
        "wc -c pkg/*.py",
        "ls -la pkg",
        f"sed -n 1,150p pkg/{files[2]}",
        "grep -rn 'TODO\\|FIXME\\|XXX' . | head -20",
        f"cat pkg/{files[-5]}",
        "cat calc.py",
        "python3 -m unittest 2>&1 | tail -5",
        f"grep -n 'def ' pkg/{files[-5]}",
        f"cat pkg/{files[2]}",
        "cat test_calc.py",
        "wc -l calc.py test_calc.py",
    ]
    room = ROUNDS - 1 - len(explore) - len(fix) - len(check)
    middle += [f"sed -n 1,80p pkg/{name}" for name in files][: max(0, room - len(middle))]
    steps = explore + middle[:room] + fix + check
    return [*steps[: ROUNDS - 1], f"echo {SUBMIT}"]


def last_step(observations: list[str]) -> int:
    found = [int(n) for text in observations for n in _MARKER.findall(text)]
    return max(found, default=0)


def next_action(turn: Turn, steps: list[str]) -> Action:
    done = last_step(turn.observations)
    if done >= len(steps):
        return Action(text=FINAL)
    step = done + 1
    if (
        step % 6 == 0
        and RECALL_TOOL in turn.tools
        and turn.last_call != RECALL_TOOL
        and turn.recall_ids
    ):
        return Action(name=RECALL_TOOL, arguments={"id": turn.recall_ids[-1]}, step=step)
    command = steps[step - 1]
    if command.startswith("echo " + SUBMIT):  # mini-swe-agent reads the first line only
        command = f"{command}; echo '{MARKER.format(step)}'"
    else:
        command = f"echo '{MARKER.format(step)}'; {command}"
    shell = next((name for name in SHELLS if name in turn.tools), None)
    if shell is None:  # a text-based agent: the command in a fenced block
        return Action(text=f"Step {step}.\n\n```bash\n{command}\n```", step=step)
    return Action(name=shell, arguments=shell_arguments(turn.tools[shell], command), step=step)


def shell_arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """``command`` in the shape the shell tool's schema asks for: a string or an argv under
    ``command`` or ``cmd``, and any other required string (a description) filled in."""
    properties = schema.get("properties") or {}
    key = "cmd" if "cmd" in properties and "command" not in properties else "command"
    value: Any = command
    if (properties.get(key) or {}).get("type") == "array":
        value = ["bash", "-lc", command]
    arguments = {key: value}
    for name in schema.get("required") or []:
        if name not in arguments and (properties.get(name) or {}).get("type") == "string":
            arguments[name] = "e2e scripted step"
    return arguments


def recall_ids(texts: list[str]) -> list[str]:
    return [found for text in texts for found in _RECALL_ID.findall(text)]


def text_of(content: Any) -> str:
    """The text of a content field in any dialect (a string, or a list of blocks/parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            text_of(part.get("text") or part.get("content"))
            for part in content
            if isinstance(part, dict)
        )
    return "" if content is None else json.dumps(content)
