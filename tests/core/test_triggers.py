"""Each trigger fires on its own measure; near starts at soft_fraction; conditions filter."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.config.settings import parse_settings
from proxy.core.planner import plan
from proxy.core.policy import ModelInfo, PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from proxy.errors import ConfigError
from tests.support.messages import assistant, chat, system, tool, user


def fired(
    messages: list[dict], counter: TokenCounter, /, *, window: int | None = None, **trigger: object
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    settings = {"context_fraction": 0, **trigger}
    policy = PolicySettings(trigger=TriggerSettings(**settings))
    info = ModelInfo(context_window=window) if window else None
    p = plan(messages, policy, model="gpt-4o", counter=counter, model_info=info, prior=None)
    return p.fired, p.near


def test_nothing_fires_with_every_trigger_disabled(counter: TokenCounter) -> None:
    assert fired(chat(50), counter) == ((), ())


def test_input_tokens_fires_over_the_threshold_and_is_near_at_soft_fraction(
    counter: TokenCounter,
) -> None:
    messages = chat(4)
    tokens = counter.count_messages(messages, "gpt-4o")
    assert fired(messages, counter, input_tokens=tokens - 1) == (("input_tokens",),) * 2
    assert fired(messages, counter, input_tokens=tokens) == ((), ("input_tokens",))
    assert fired(messages, counter, input_tokens=tokens * 2) == ((), ())


def test_context_fraction_needs_a_known_window(counter: TokenCounter) -> None:
    messages = chat(4)
    tokens = counter.count_messages(messages, "gpt-4o")
    assert fired(messages, counter, context_fraction=0.5, window=tokens)[0] == ("context_fraction",)
    assert fired(messages, counter, context_fraction=0.5, window=tokens * 3)[0] == ()
    assert fired(messages, counter, context_fraction=0.5)[0] == ()


def test_tools_schemas_count_towards_input_tokens(counter: TokenCounter) -> None:
    messages = chat(1)
    tokens = counter.count_messages(messages, "gpt-4o")
    tools = [{"type": "function", "function": {"name": "f" * 50, "description": "d " * 100}}]
    policy = PolicySettings(trigger=TriggerSettings(context_fraction=0, input_tokens=tokens + 5))
    p = plan(
        messages, policy, model="gpt-4o", counter=counter, model_info=None, prior=None, tools=tools
    )
    assert p.fired == ("input_tokens",)


def test_messages_and_interactions_triggers(counter: TokenCounter) -> None:
    messages = chat(5)  # 11 messages, 5 interactions
    assert fired(messages, counter, messages=10)[0] == ("messages",)
    assert fired(messages, counter, messages=11)[0] == ()
    assert fired(messages, counter, interactions=4)[0] == ("interactions",)
    assert fired(messages, counter, interactions=5)[0] == ()


def test_interaction_tokens_counts_only_interactions(counter: TokenCounter) -> None:
    messages = [system("x " * 2000), *chat(2, preamble=False)]
    inside = sum(counter.per_message(messages[1:], "gpt-4o"))
    assert fired(messages, counter, interaction_tokens=inside - 1)[0] == ("interaction_tokens",)
    assert fired(messages, counter, interaction_tokens=inside)[0] == ()


def test_conditions_filter_which_interactions_count(counter: TokenCounter) -> None:
    messages = [
        user("hello"),
        assistant("hi"),
        user("deploy please"),
        assistant("done"),
        user("deploy again"),
        assistant("done"),
    ]
    assert fired(messages, counter, interactions=1, conditions=['"deploy" in text'])[0] == (
        "interactions",
    )
    assert fired(messages, counter, interactions=2, conditions=['"deploy" in text'])[0] == ()
    # an expression that errors on every message (missing key) just never matches
    assert fired(messages, counter, interactions=1, conditions=['message["missing"] == 1'])[0] == ()


def tool_turn(name: str, result: str) -> list[dict]:
    return [user("go"), assistant(None, ("c1", name, "{}")), tool("c1", result)]


@pytest.mark.parametrize(
    ("result", "success", "error"),
    [
        ("All 12 tests passed", ("on_tool_success",), ()),
        ('{"error": {"message": "not found"}}', (), ("on_tool_error",)),
        ("Traceback (most recent call last): ...", (), ("on_tool_error",)),
        ('{"is_error": true}', (), ("on_tool_error",)),
        ('{"error": null, "ok": 1}', ("on_tool_success",), ()),
        # Tool output that is JSON too deep (or too long a number) for the parser is
        # read as text, not a RecursionError's 500.
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", ("on_tool_success",), ()),
        ('{"a": ' + "9" * 5000 + "}", ("on_tool_success",), ()),
    ],
)
def test_tool_success_and_error_triggers(
    counter: TokenCounter, result: str, success: tuple, error: tuple
) -> None:
    messages = tool_turn("run_tests", result)
    assert fired(messages, counter, on_tool_success=["run_tests"])[0] == success
    assert fired(messages, counter, on_tool_error=["run_tests"])[0] == error
    assert fired(messages, counter, on_tool_error=["other"], on_tool_success=["other"])[0] == ()


def test_tool_triggers_look_only_at_the_last_interaction(counter: TokenCounter) -> None:
    messages = [*tool_turn("run_tests", "ok"), user("thanks"), assistant("welcome")]
    assert fired(messages, counter, on_tool_success=["run_tests"])[0] == ()


def test_tool_triggers_look_only_at_the_results_new_in_this_request(
    counter: TokenCounter,
) -> None:
    """One agent run is one interaction; a success rounds ago must not fire again."""
    passed = tool_turn("run_tests", "All 12 tests passed")
    later = [assistant(None, ("c2", "read_file", "{}")), tool("c2", "def f(): ...")]
    assert fired([*passed, *later], counter, on_tool_success=["run_tests"])[0] == ()
    # the model's answer after a result: nothing new arrived with this request
    assert fired([*passed, assistant("done")], counter, on_tool_success=["run_tests"])[0] == ()
    again = [assistant(None, ("c3", "run_tests", "{}")), tool("c3", "All 12 tests passed")]
    assert fired([*passed, *later, *again], counter, on_tool_success=["run_tests"])[0] == (
        "on_tool_success",
    )


def test_custom_error_pattern(counter: TokenCounter) -> None:
    messages = tool_turn("build", "BUILD FAILED in 3s")
    assert fired(messages, counter, on_tool_error=["build"])[0] == ()
    assert fired(messages, counter, on_tool_error=["build"], tool_error_pattern="FAILED")[0] == (
        "on_tool_error",
    )


@pytest.mark.parametrize(
    "expression",
    ["import os", "foo == 1", "__import__('os')", "message.__class__", "lambda: 1", "x = 1"],
)
def test_invalid_conditions_are_rejected_at_config_load(expression: str) -> None:
    with pytest.raises(ValidationError, match=r"conditions\[0\]"):
        TriggerSettings(conditions=[expression])


def test_invalid_condition_in_yaml_names_the_key_and_line() -> None:
    text = "policies:\n  default:\n    trigger:\n      conditions: ['role ==']\n"
    with pytest.raises(ConfigError, match=r"policies.default.trigger.*line 3"):
        parse_settings(text, environ={})
