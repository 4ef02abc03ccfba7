"""The dialects' context management under ``strategy: native``, as pure functions:
what is added to a body (the client's own settings win), and what an answer is read to say."""

from __future__ import annotations

import json

from proxy.compaction.dialect.native import NativeAsk, NativeUsage, ask_of, planned_policy
from proxy.core.policy import PolicySettings
from proxy.dialects.anthropic_native import ANTHROPIC_NATIVE
from proxy.dialects.responses_native import RESPONSES_NATIVE
from tests.support.native_provider import message_events

ASK = NativeAsk(
    trigger_tokens=30_000,
    keep_tool_uses=2,
    clear_at_least=5_000,
    compaction=True,
    clear_tool_uses=True,
    exclude_tools=("memory",),
)


def test_responses_gets_a_compaction_entry_unless_the_client_has_one() -> None:
    body, betas = RESPONSES_NATIVE.add({"input": "hi"}, ASK)
    assert body["context_management"] == [{"type": "compaction", "compact_threshold": 30_000}]
    assert betas == ()
    theirs = {"input": "hi", "context_management": [{"type": "compaction"}]}
    assert RESPONSES_NATIVE.add(theirs, ASK) == (theirs, ())


def test_anthropic_gets_both_edits_with_their_betas_and_the_clients_kind_wins() -> None:
    body, betas = ANTHROPIC_NATIVE.add({"messages": []}, ASK)
    clearing, compaction = body["context_management"]["edits"]
    assert clearing == {
        "type": "clear_tool_uses_20250919",
        "keep": {"type": "tool_uses", "value": 2},
        "trigger": {"type": "input_tokens", "value": 30_000},
        "clear_at_least": {"type": "input_tokens", "value": 5_000},
        "exclude_tools": ["memory"],
    }
    # Anthropic's compaction trigger is at least 50,000 input tokens.
    assert compaction == {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 50_000},
    }
    assert betas == ("context-management-2025-06-27", "compact-2026-01-12")
    theirs = {"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}
    body, betas = ANTHROPIC_NATIVE.add({"messages": [], "context_management": theirs}, ASK)
    assert body["context_management"]["edits"][:2] == theirs["edits"]
    assert [e["type"] for e in body["context_management"]["edits"]][2:] == ["compact_20260112"]
    assert betas == ("compact-2026-01-12",)


def test_an_anthropic_stream_is_read_for_its_edits_compaction_and_usage() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "compaction", "content": "S"}, {"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 900,
            "output_tokens": 5,
            "iterations": [
                {"type": "compaction", "input_tokens": 80_000, "output_tokens": 700},
                {"type": "message", "input_tokens": 900, "output_tokens": 5},
            ],
        },
        "context_management": {
            "applied_edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "cleared_tool_uses": 3,
                    "cleared_input_tokens": 1200,
                }
            ]
        },
    }
    for answer in (json.dumps(message).encode(), b"".join(message_events(message))):
        report = ANTHROPIC_NATIVE.report(answer)
        assert report.edits == ("clear_tool_uses_20250919", "compaction")
        assert report.cleared_tool_uses == 3 and report.cleared_input_tokens == 1200
        assert report.compaction_usage == NativeUsage(input_tokens=80_000, output_tokens=700)
        assert report.detail() == "clear_tool_uses_20250919=3 tool uses/1200 tokens; compaction=1"


def test_a_responses_stream_counts_each_compaction_item_once() -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}
    events = [
        {"type": "response.output_item.added", "item": item},
        {"type": "response.output_item.done", "item": item},
        {"type": "response.completed", "response": {"output": [item]}},
    ]
    stream = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    assert RESPONSES_NATIVE.report(stream).compactions == 1
    assert not RESPONSES_NATIVE.report(b'{"output": []}').applied


def test_refusals_are_recognised_by_the_field_they_name() -> None:
    error = b'{"error": {"message": "Unknown parameter: \'context_management\'."}}'
    assert RESPONSES_NATIVE.refuses(400, error)
    assert not RESPONSES_NATIVE.refuses(400, b'{"error": {"message": "bad input"}}')
    assert not RESPONSES_NATIVE.refuses(500, error)
    assert ANTHROPIC_NATIVE.refuses(400, b"unexpected value for the anthropic-beta header")


def test_the_policys_keep_becomes_tool_uses_and_its_trigger_a_threshold() -> None:
    def call(n: int) -> dict:
        return {"role": "assistant", "tool_calls": [{"id": f"c{n}"}]}

    run = [{"role": "user", "content": "task 1"}, call(1), call(2)]
    run += [{"role": "user", "content": "task 2"}, call(3), call(4), call(5)]
    policy = PolicySettings(
        strategy="native", keep={"interactions": 1}, trigger={"context_fraction": 0.5}
    )
    ask = ask_of(policy, run, 200_000)
    assert ask.trigger_tokens == 100_000
    assert ask.keep_tool_uses == 3  # the current interaction, task 2, whole
    by_messages = PolicySettings(strategy="native", keep={"messages": 3})
    assert ask_of(by_messages, run, None).keep_tool_uses == 3  # the last three messages
    alone = [{"role": "user", "content": "task"}, call(1), call(2)]
    assert ask_of(PolicySettings(keep={"interactions": 3}), alone, None).keep_tool_uses == 2
    assert ask_of(PolicySettings(keep={"interactions": 0}), run, None).keep_tool_uses == 1
    assert ask_of(policy, run, None).trigger_tokens is None
    assert planned_policy(policy, native=True).strategy == "summarize"
    assert planned_policy(policy, native=False).strategy == "summarize"  # the default fallback
