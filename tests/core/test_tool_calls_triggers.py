"""Tool triggers that match what a call does, not only its name: real agents run their tests
and commits through one shell tool (Claude Code ``Bash``, Codex ``exec_command`` / ``shell``,
opencode and mini-swe-agent ``bash``), so a trigger naming ``run_tests`` never fires for them.
An entry ``Tool(regex)`` (Claude Code's permission-rule spelling) fires when the call is to
``Tool`` and the regex is found in the command it runs. The calls and results below are shaped
as those agents record them."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml

from proxy.config.settings import parse_settings
from proxy.core.messages import is_error_result
from proxy.core.planner import plan
from proxy.core.policy import PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from proxy.core.tool_calls import ToolCall, calls_of
from proxy.core.triggers import _tool_outcomes, new_tool_results
from proxy.dialects.anthropic_messages import AnthropicMessages
from proxy.errors import ConfigError
from tests.support.messages import assistant, tool, user

RECIPE = Path(__file__).resolve().parents[2] / "config" / "examples" / "coding-agent.yaml"


def recipe_trigger() -> TriggerSettings:
    settings = parse_settings(RECIPE.read_text(encoding="utf-8"), environ={})
    return settings.policies["default"].trigger


def outcome(trigger: TriggerSettings, name: str, arguments: dict, result: str) -> tuple:
    messages = [
        user("fix the failing test"),
        assistant(None, ("c1", name, json.dumps(arguments))),
        tool("c1", result),
    ]
    policy = PolicySettings(trigger=trigger)
    counter = TokenCounter({})
    return plan(
        messages, policy, model="gpt-4o", counter=counter, model_info=None, prior=None
    ).fired


# (agent's tool, its arguments, its result, what the recipe should fire)
CALLS = [
    # Claude Code: Bash {"command", "description"}; a failure reads "Exit code N" first
    ("Bash", {"command": "cargo test 2>&1", "description": "Run tests"},
     "test result: ok. 12 passed; 0 failed", ("on_tool_success",)),
    ("Bash", {"command": "python -m pytest -q tests/"},
     "Exit code 1\n===== 2 failed, 40 passed in 3.1s =====", ()),
    ("Bash", {"command": "git add -A && git commit -m 'Port to Rust'"},
     "[master 7e2d976] Port to Rust\n 23 files changed", ("on_tool_success",)),
    ("Bash", {"command": "ls -la src/"}, "total 8\n-rw-r--r-- 1 a a 10 main.rs", ()),
    ("Bash", {"command": "npm run build"}, "Exit code 2\nsrc/app.ts(3,1): error TS2304",
     ("on_tool_error",)),
    ("Read", {"file_path": "/repo/tests/test_app.py"}, "1\timport pytest", ()),
    # Codex: exec_command {"cmd"} and shell {"command": [argv]}
    ("exec_command", {"cmd": "go test ./..."}, "Process exited with code 0\nok  pkg 0.2s",
     ("on_tool_success",)),
    ("shell", {"command": ["bash", "-lc", "pytest -x"]},
     "Exit code: 1\nFAILED tests/test_a.py::test_x", ()),
    ("shell", {"command": ["bash", "-lc", "cat README.md"]}, "# readme", ()),
    # opencode: bash {"command", "description"}
    ("bash", {"command": "bun test", "description": "Runs tests"}, "12 pass\n0 fail",
     ("on_tool_success",)),
    # mini-swe-agent: bash {"command"}, the result wrapped in <returncode>
    ("bash", {"command": "cd /testbed && python tests/runtests.py auth_tests"},
     "<returncode>0</returncode>\n<output>\nOK\n</output>", ("on_tool_success",)),
    ("bash", {"command": "cd /testbed && python -m pytest tests/x.py"},
     "<returncode>1</returncode>\n<output>\n1 failed\n</output>", ()),
    # the recipe's own named tools still fire
    ("run_tests", {"target": "tests"}, "40 passed", ("on_tool_success",)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "arguments", "result", "expected"), CALLS)
def test_the_coding_agent_recipe_fires_on_what_real_agents_call(
    tiktoken_files: object, name: str, arguments: dict, result: str, expected: tuple
) -> None:
    trigger = recipe_trigger().model_copy(update={"context_fraction": 0, "interaction_tokens": 0})
    assert outcome(trigger, name, arguments, result) == expected


def test_an_entry_matches_the_command_not_only_the_name(tiktoken_files: object) -> None:
    trigger = TriggerSettings(context_fraction=0, on_tool_success=("Bash(\\bmake check\\b)",))
    assert outcome(trigger, "Bash", {"command": "make check"}, "ok") == ("on_tool_success",)
    assert outcome(trigger, "Bash", {"command": "make"}, "ok") == ()
    assert outcome(trigger, "bash", {"command": "make check"}, "ok") == ()  # names are exact


def test_a_bad_regex_in_an_entry_is_refused_when_the_config_loads() -> None:
    text = yaml.safe_dump(
        {"policies": {"default": {"trigger": {"on_tool_success": ["Bash(pytest[)"]}}}}
    )
    with pytest.raises(ConfigError, match="on_tool_success"):
        parse_settings(text, environ={})


# Claude Code's answer when the user rejects a tool call: an error result (``is_error``) whose
# text says nothing a pattern would read as a failure.
REJECTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). STOP what you are doing and "
    "wait for the user to tell you how to proceed."
)


def claude_code_outcome(command: str, result: str, *, is_error: bool) -> tuple:
    """What the recipe fires on a Claude Code request (Anthropic Messages, as it sends them)
    whose last message answers one Bash call."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "commit the port"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                     "input": {"command": command, "description": "Commit"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": result,
                     "is_error": is_error},
                ],
            },
        ],
    }  # fmt: skip
    messages = AnthropicMessages().conversation(body).messages
    trigger = recipe_trigger().model_copy(update={"context_fraction": 0, "interaction_tokens": 0})
    return plan(
        messages,
        PolicySettings(trigger=trigger),
        model="claude-sonnet-4-5",
        counter=TokenCounter({}),
        model_info=None,
        prior=None,
    ).fired


def test_a_call_the_user_rejected_is_no_success(tiktoken_files: object) -> None:
    """A commit the user refused did not happen: no task boundary, no summary for it."""
    commit = "git add -A && git commit -m 'Port to Rust'"
    assert claude_code_outcome(commit, "[master 7e2d976] Port to Rust", is_error=False) == (
        "on_tool_success",
    )
    assert claude_code_outcome(commit, REJECTED, is_error=True) == ()


def test_an_error_result_of_a_build_fires_on_tool_error_whatever_its_text(
    tiktoken_files: object,
) -> None:
    assert claude_code_outcome("npm run build", "src/app.ts: TS2304", is_error=True) == (
        "on_tool_error",
    )


def _outcomes_read_forward(messages: list[dict], pattern: str) -> tuple[set, set]:
    """What the new results' outcomes were when every call of the history was read first."""
    start = new_tool_results(messages)
    succeeded: set = set()
    failed: set = set()
    if start == len(messages):
        return succeeded, failed
    calls: dict = {}
    for message in messages[:start]:
        if message.get("role") == "assistant":
            calls.update(calls_of(message))
    for message in messages[start:]:
        call = calls.get(str(message.get("tool_call_id")))
        name = message.get("name")
        if call is None and isinstance(name, str) and name:
            call = ToolCall(name, "")
        if call is not None and call.name:
            error = is_error_result(message, re.compile(pattern))
            (failed if error else succeeded).add(call)
    return succeeded, failed


def test_the_calls_new_results_answer_are_found_from_the_newest_back() -> None:
    """The latest call of each id (ids repeat, calls go unanswered, legacy results carry a
    name), found from the end of the history, is the one reading every call found."""
    rng = random.Random(31)
    pattern = TriggerSettings().tool_error_pattern
    commands = ["pytest -q", "ls", "make", "git commit -m x"]
    for step in range(400):
        history: list[dict] = [user("go")]
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.4:
                calls = [
                    {
                        "id": rng.choice(["a", "b", "c", "d", 7]),
                        "type": "function",
                        "function": {
                            "name": rng.choice(["Bash", "run_tests", ""]),
                            "arguments": json.dumps({"command": rng.choice(commands)}),
                        },
                    }
                    for _ in range(rng.randint(1, 3))
                ]
                history.append({"role": "assistant", "content": None, "tool_calls": calls})
            elif kind < 0.8:
                result = rng.choice(["ok", "2 failed", "Exit code 1", "done"])
                history.append(tool(rng.choice(["a", "b", "c", "d", "e"]), result))
            elif kind < 0.9:
                history.append({"role": "function", "name": rng.choice(["f", ""]), "content": "x"})
            else:
                history.append(assistant("thinking"))
        found: tuple[set, set] = (set(), set())
        _tool_outcomes(history, pattern, *found)
        assert found == _outcomes_read_forward(history, pattern), step
