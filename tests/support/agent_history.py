"""A coding agent's session, built without an agent: one task, then rounds of tool calls
(``read_file``, ``grep``, ``bash``) whose results are real files of this repository, appended
and never edited, as Claude Code, Codex or opencode send theirs.

``requests(history)`` gives the message lists the agent would have sent, in order: each is a
prefix of the next, ending with the task or a tool result. Replaying them one by one through a
proxy shows what compaction does to a real append-only session (which requests carry
the summary, how often one is made). The content is deterministic: the same repository gives
the same history.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_TEXT = (
    "You are a coding agent working in a Python repository. Read before you edit, keep the "
    "tests green, and report what you changed."
)
TASK_TEXT = (
    "The summary is dropped after two requests when clear_tool_results is on. Find out why in "
    "proxy/core and proxy/compaction, and fix it with a test."
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string"}},
                "required": [arg],
            },
        },
    }
    for name, arg, description in (
        ("read_file", "path", "Read a file of the repository."),
        ("grep", "pattern", "Search the repository for a regular expression."),
        ("bash", "command", "Run a shell command in the repository."),
    )
]
# The coding-agent recipe's policy (config/examples/coding-agent.yaml), its token numbers scaled
# to a 50k-token session: summarized past 12k tokens, 4k kept, old results stubbed in batches.
CODING_AGENT: dict[str, Any] = {
    "strategy": "summarize",
    "trigger": {"input_tokens": 12000, "context_fraction": 0},
    "keep": {"tokens": 4000},
    "clear_tool_results": {
        "older_than_interactions": 2,
        "older_than_rounds": 5,
        "min_tokens": 300,
        "clear_at_least": 8000,
    },
    "pin": ['role == "user"', 'contains("#keep")'],
}
# Claude Code's numbers as its users set them (a 45k trigger, 12k kept), no stubs. The price
# trigger is off: with it, a priced model's next summary may start from pays_from_tokens (32k)
# when it pays, which is the price tests' business; these measure the token trigger's headroom.
LARGE_PROMPT_AGENT: dict[str, Any] = {
    "strategy": "summarize",
    "trigger": {"input_tokens": 45_000, "context_fraction": 0, "pays": False},
    "keep": {"tokens": 12_000},
    "pin": ['role == "user"', 'contains("#keep")'],
}
# Results are cut as agents cut them (Claude Code reads 2000 lines; opencode and Codex cap the
# bytes of a command's output): here a fixed number of characters, so a round is 1-3k tokens.
MAX_RESULT_CHARS = 9000


# The session reads this repository as it was at one commit (where these tests were
# written), so its figures do not move each time the code changes; a copy without git history
# reads the working tree instead.
REVISION = "d578452"


@functools.cache
def _files() -> tuple[tuple[str, str], ...]:
    """The repository's larger Python files (path, text), in a fixed order."""
    try:
        return _files_at(REVISION)
    except (OSError, subprocess.CalledProcessError):
        found = sorted((ROOT / "proxy").rglob("*.py")) + sorted((ROOT / "tests/core").glob("*.py"))
        texts = ((str(p.relative_to(ROOT)), p.read_text()) for p in found)
        return tuple((rel, text) for rel, text in texts if len(text.encode()) > 2000)


@functools.cache
def _docs() -> tuple[str, ...]:
    """The texts of docs/*.md, in a fixed order, at ``REVISION`` where git has it."""
    try:
        names = _git("ls-tree", "--name-only", REVISION, "docs/").split()
        return tuple(_git("show", f"{REVISION}:{n}") for n in sorted(names) if n.endswith(".md"))
    except (OSError, subprocess.CalledProcessError):
        return tuple(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def _files_at(revision: str) -> tuple[tuple[str, str], ...]:
    git = _git
    names = git("ls-tree", "-r", "--name-only", revision, "proxy", "tests/core").split()
    # Sorted as the working tree's listing was: proxy's files by path, then tests/core's.
    chosen = sorted((n for n in names if n.startswith("proxy/") and n.endswith(".py")), key=Path)
    chosen += sorted(
        n for n in names if n.startswith("tests/core/") and n.count("/") == 2 and n.endswith(".py")
    )
    texts = ((name, git("show", f"{revision}:{name}")) for name in chosen)
    return tuple((name, text) for name, text in texts if len(text.encode()) > 2000)


def _grep(pattern: str, files: tuple[tuple[str, str], ...]) -> str:
    lines = []
    for rel, text in files:
        for n, line in enumerate(text.splitlines(), start=1):
            if pattern in line:
                lines.append(f"{rel}:{n}:{line}")
    return "\n".join(lines) or "(no match)"


def _round(n: int, files: tuple[tuple[str, str], ...]) -> tuple[str, dict[str, str], str]:
    """Round ``n``'s tool: its name, arguments and result (mostly file reads, as in a real run)."""
    kind = n % 5
    rel, text = files[(n * 7) % len(files)]
    stem = Path(rel).stem
    if kind == 3:
        words = ("def ", "return ", "import ", "class ", "raise ")
        pattern = words[n % len(words)] + stem
        return "grep", {"pattern": pattern}, _grep(stem, files)
    if kind == 4:
        command = f"wc -l {rel} && head -c 4000 {rel}"
        return "bash", {"command": command}, f"{len(text.splitlines())} {rel}\n{text[:4000]}"
    return "read_file", {"path": rel}, text


def agent_history(rounds: int = 40, *, system: str = SYSTEM_TEXT) -> list[dict[str, Any]]:
    """The whole session in chat completions' shape: the system prompt, the task, then
    ``rounds`` rounds of one assistant tool call and its result."""
    files = _files()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": TASK_TEXT},
    ]
    for n in range(rounds):
        name, arguments, result = _round(n, files)
        call_id = f"call_{n:03d}"
        history.append(
            {
                "role": "assistant",
                "content": f"Step {n}: looking at {next(iter(arguments.values()))}.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        history.append(
            {"role": "tool", "tool_call_id": call_id, "content": result[:MAX_RESULT_CHARS]}
        )
    return history


def requests(history: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Each request of the session: the history up to the task, then up to each tool result."""
    for end in range(2, len(history) + 1):
        if history[end - 1]["role"] in ("user", "tool"):
            yield history[:end]


def fixed_prompt(tokens_wanted: int, counter: Any, model: str = "gpt-4o") -> str:
    """A system prompt of about ``tokens_wanted`` tokens (an agent's instructions, its skills and
    rules): real text of this repository's docs, repeated as needed."""
    text = SYSTEM_TEXT
    for doc in _docs() * 10:
        if counter.count_text(text, model) >= tokens_wanted:
            break
        text += "\n\n" + doc
    while counter.count_text(text, model) > tokens_wanted:
        text = text[: int(len(text) * 0.95)]
    return text


# --- the same session in each API's shape -------------------------------------------------------


def as_responses(prefix: list[dict[str, Any]]) -> dict[str, Any]:
    """``instructions`` and ``input`` of the Responses API for a chat-shaped ``prefix``."""
    items: list[dict[str, Any]] = []
    for message in prefix[1:]:
        if message["role"] == "user":
            items.append({"type": "message", "role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": message["content"]}],
                }
            )
            for call in message["tool_calls"]:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message["content"],
                }
            )
    return {"instructions": prefix[0]["content"], "input": items}


def as_anthropic(prefix: list[dict[str, Any]]) -> dict[str, Any]:
    """``system`` and ``messages`` of Anthropic Messages for a chat-shaped ``prefix``."""
    messages: list[dict[str, Any]] = []
    for message in prefix[1:]:
        if message["role"] == "user":
            messages.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            content: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}]
            for call in message["tool_calls"]:
                function = call["function"]
                content.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": function["name"],
                        "input": json.loads(function["arguments"]),
                    }
                )
            messages.append({"role": "assistant", "content": content})
        else:
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            messages.append({"role": "user", "content": [result]})
    return {"system": prefix[0]["content"], "messages": messages}


def anthropic_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
    ]


def responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", **t["function"]} for t in TOOLS]
