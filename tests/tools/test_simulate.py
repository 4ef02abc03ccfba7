"""``compaction-proxy simulate`` as a user runs it: a real process, and a real mock provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream, completion, json_reply

SYSTEM = "You are a coding agent working on the shop repository."
MESSAGES = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "The checkout total is wrong with a coupon (SHOP-812)."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_read",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "src/shop/cart.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_read", "content": "x = round(total, 2)\n" * 60},
    {"role": "assistant", "content": "The coupon is applied after rounding, line 90."},
    {"role": "user", "content": "Fix it, then tell me what changed."},
    {"role": "assistant", "content": "Moved the coupon before rounding in src/shop/cart.py."},
    {"role": "user", "content": "Now run the tests."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_tests",
                "type": "function",
                "function": {"name": "run_tests", "arguments": "{}"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_tests", "content": "42 passed in 1.2s"},
]
POLICIES = {
    "default": {
        "trigger": {"input_tokens": 400, "on_tool_success": ["run_tests"]},
        "keep": {"interactions": 1},
    },
    "gentle": {"strategy": "neuralyze", "trigger": {"input_tokens": 100000}},
}
CONFIG = config_yaml(policies=POLICIES)


def run_cli(*args: str, openai_key: str | None = None) -> subprocess.CompletedProcess:
    # The upstream override and a real key must not leak in from the developer's shell.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTION_PROXY_")}
    env.pop("OPENAI_API_KEY", None)
    if openai_key is not None:
        env["OPENAI_API_KEY"] = openai_key
    return subprocess.run(
        [sys.executable, "-m", "proxy", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.fixture
def files(tmp_path: Path, tiktoken_files: Path) -> tuple[Path, Path]:
    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps({"model": "gpt-4o", "messages": MESSAGES}))
    config = tmp_path / "proxy.yaml"
    config.write_text(CONFIG)
    return conversation, config


def test_simulate_prints_interactions_triggers_tokens_and_what_is_sent(
    files: tuple[Path, Path],
) -> None:
    conversation, config = files
    result = run_cli(str(conversation), "--config", str(config))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    plan = json.loads(run_cli(str(conversation), "--config", str(config), "--json").stdout)
    # The interactions with their message ranges and fates.
    assert "user, assistant (1 call), tool, assistant" in out
    assert "1..4" in out and "5..6" in out and "7..9" in out
    assert out.count("to summarize") == 2
    assert plan["summary_needed"] == {"messages": [1, 7], "extends_previous": False}
    assert "messages 1..6 (2 interactions) would be summarized by gpt-4o-mini" in out
    # The triggers: input_tokens and the tool success both fired.
    assert sorted(plan["fired"]) == ["input_tokens", "on_tool_success"]
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") == 5}
    assert "FIRED" in rows["input_tokens"] and "400" in rows["input_tokens"]
    assert "FIRED" in rows["on_tool_success"]
    assert "FIRED" not in rows["context_fraction"]
    # Token counts, and what would be sent: every message (no summary yet), previewed.
    assert f"tokens before {plan['tokens_before']}" in out
    assert "messages 10 -> 10" in out
    assert SYSTEM in out
    assert "[calls] run_tests({})" in out
    assert "x = round(total, 2) x = round(total, 2)" in out and "…" in out


def test_simulate_takes_a_bare_message_list_and_another_policy(files: tuple[Path, Path]) -> None:
    conversation, config = files
    bare = conversation.with_name("bare.json")
    bare.write_text(json.dumps(MESSAGES))
    result = run_cli(str(bare), "--config", str(config), "--policy", "gentle", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["policy"] == "gentle" and plan["strategy"] == "neuralyze"
    assert plan["model"] == "gpt-4o"
    assert plan["fired"] == []
    assert [i["fate"] for i in plan["interactions"]] == ["kept"] * 3
    assert len(plan["messages"]) == len(MESSAGES)


def test_simulate_reports_bad_input_without_a_traceback(files: tuple[Path, Path]) -> None:
    conversation, config = files
    result = run_cli(str(conversation), "--config", str(config), "--policy", "nope")
    assert result.returncode == 2
    assert "no configured policy named 'nope'" in result.stderr
    broken = conversation.with_name("broken.json")
    broken.write_text(json.dumps({"messages": [{"role": "user"}]}))
    result = run_cli(str(broken))
    assert result.returncode == 2
    assert "messages[0]" in result.stderr and "Traceback" not in result.stderr


def test_simulate_shows_a_lone_surrogate_as_its_escape(files: tuple[Path, Path]) -> None:
    """``"\\ud800"`` is valid JSON no UTF-8 stdout takes: shown as the escape, in the
    table and in --json (where it stays valid JSON), not a traceback."""
    conversation, config = files
    odd = conversation.with_name("surrogate.json")
    odd.write_text(json.dumps([*MESSAGES[:1], {"role": "user", "content": "a \ud800 b"}]))
    table = run_cli(str(odd), "--config", str(config))
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    assert "a \\ud800 b" in table.stdout
    plan = run_cli(str(odd), "--config", str(config), "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["messages"][1]["content"] == "a \ud800 b"


def test_simulate_summarize_calls_the_summarizer_and_shows_the_summary(
    files: tuple[Path, Path], mock: MockUpstream
) -> None:
    conversation, _ = files
    upstream = mock
    summary = "The user reported SHOP-812; the coupon was moved before rounding."
    upstream.push(json_reply(completion(summary)))
    config = conversation.with_name("summarize.yaml")
    config.write_text(
        config_yaml(
            provider=mock.url,
            upstream={"api_key": "sk-test-key"},
            summarizer={"model": "summary-model"},
            policies=POLICIES,
        )
    )
    result = run_cli(str(conversation), "--config", str(config), "--summarize")
    assert result.returncode == 0, result.stderr
    # The provider received exactly one summarizer call, with the old turns and the key.
    calls = upstream.chat_requests()
    assert len(calls) == 1
    body = calls[0].json()
    assert body["model"] == "summary-model"
    assert calls[0].headers["authorization"] == "Bearer sk-test-key"
    transcript = body["messages"][-1]["content"]
    assert "SHOP-812" in transcript and "Moved the coupon before rounding" in transcript
    assert "Now run the tests." not in transcript  # the kept interaction is not summarized
    # The output shows the summary, the old interactions as summarized, and the new prompt.
    out = result.stdout
    assert summary in out
    assert out.count("summarized") >= 2
    assert "what would be sent (with the summary)" in out
    assert "<agent_summary>" in out
    assert "messages 10 -> 5" in out


def test_simulate_summarize_reports_a_failing_summarizer(
    files: tuple[Path, Path], mock: MockUpstream
) -> None:
    conversation, _ = files
    upstream = mock
    upstream.push(json_reply({"error": {"message": "overloaded"}}, status=503))
    config = conversation.with_name("failing.yaml")
    config.write_text(config_yaml(provider=mock.url, policies=POLICIES))
    result = run_cli(
        str(conversation), "--config", str(config), "--summarize", openai_key="sk-from-env"
    )
    assert result.returncode == 1
    assert "the summary failed: summarizer returned HTTP 503" in result.stderr
    assert "Traceback" not in result.stderr
    # No key in the config: the summarizer used $OPENAI_API_KEY, as a caller's own key.
    [call] = upstream.chat_requests()
    assert call.headers["authorization"] == "Bearer sk-from-env"


def test_simulate_says_where_the_window_comes_from(files: tuple[Path, Path]) -> None:
    conversation, config = files
    out = run_cli(str(conversation), "--config", str(config)).stdout
    assert "model gpt-4o (window 128000 from the built-in table, o200k_base)" in out
    config.write_text(config_yaml(policies=POLICIES, models={"acme*": {"context_window": 4096}}))
    out = run_cli(str(conversation), "--config", str(config), "--model", "acme-7b").stdout
    assert "model acme-7b (window 4096 from the config table" in out
    out = run_cli(str(conversation), "--config", str(config), "--model", "mystery").stdout
    assert "window unknown: context_fraction is off for this model" in " ".join(out.split())


def test_simulate_shows_a_cut_between_the_rounds_of_one_task(
    tmp_path: Path, tiktoken_files: Path
) -> None:
    """It used to say ``input_tokens ... FIRED`` and save 0, with nothing to summarize."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}]
    messages.append({"role": "user", "content": "fix the failing tests"})
    for i in range(30):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "FAILED x " * 80})
    conversation = tmp_path / "agent.json"
    conversation.write_text(json.dumps(messages))
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "policies:\n  default:\n    trigger: {input_tokens: 3000}\n    keep: {tokens: 1500}\n"
    )
    result = run_cli(str(conversation), "--config", str(config))
    assert result.returncode == 0, result.stderr
    plan = json.loads(run_cli(str(conversation), "--config", str(config), "--json").stdout)
    covered = plan["summary_needed"]["messages"][1]
    assert 2 < covered < len(messages) and messages[covered - 1]["role"] == "tool"
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert f"to summarize to message {covered - 1}, user message" in out
    assert "user, [assistant (1 call), tool] x30" in out
    assert "the last one up to a tool-round boundary" in out
    assert plan["interactions"][0]["rounds"] == 30 and not plan["blocked"]


def test_simulate_says_when_a_fired_trigger_is_blocked(
    tmp_path: Path, tiktoken_files: Path
) -> None:
    conversation = tmp_path / "huge.json"
    conversation.write_text(json.dumps([{"role": "user", "content": "log line " * 2000}]))
    config = tmp_path / "proxy.yaml"
    config.write_text("policies:\n  default:\n    trigger: {input_tokens: 3000}\n")
    result = run_cli(str(conversation), "--config", str(config))
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())  # rich wraps long lines
    assert "FIRED, blocked" in out and "X-Compaction: blocked" in out


def test_simulate_summarize_uses_the_policys_own_summarizer(
    files: tuple[Path, Path], mock: MockUpstream
) -> None:
    conversation, _ = files
    upstream = mock
    upstream.push(json_reply(completion("The coupon was moved before rounding.")))
    config = conversation.with_name("own.yaml")
    own = {"summarizer": {"model": "$request", "prompt": "OWN-PROMPT"}}
    config.write_text(
        config_yaml(
            {"policies": POLICIES},
            provider=mock.url,
            upstream={"api_key": "sk-test-key"},
            summarizer={"model": "summary-model"},
            policies={"default": own},
        )
    )
    shown = run_cli(str(conversation), "--config", str(config))
    result = run_cli(str(conversation), "--config", str(config), "--summarize")
    assert "would be summarized by gpt-4o at" in shown.stdout
    assert result.returncode == 0, result.stderr
    (call,) = upstream.chat_requests()
    assert call.json()["model"] == "gpt-4o"  # $request: the conversation's own model
    assert call.json()["messages"][0]["content"].startswith("OWN-PROMPT")
