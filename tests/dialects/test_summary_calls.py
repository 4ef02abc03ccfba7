"""The body of a summary asked on the cached prefix, per dialect: what the provider's
cache reads (tools, system, messages and the client's cache marks) stays as sent; only what
cannot go on changes."""

from __future__ import annotations

import copy

from proxy.compaction.summaries.prefix_summary import prefix_is_cheaper
from proxy.dialects.anthropic_messages import MESSAGES
from proxy.dialects.chat_completions import CHAT
from proxy.dialects.responses import RESPONSES
from proxy.economics.prices import Price

TOOL = {"name": "read_file", "input_schema": {"type": "object"}}
MARK = {"type": "ephemeral"}


def anthropic_sent() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "stream": True,
        "system": [{"type": "text", "text": "You code.", "cache_control": MARK}],
        "tools": [TOOL],
        "messages": [
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "x = 1"},
                    {"type": "text", "text": "go on", "cache_control": MARK},
                ],
            },
        ],
    }


def test_anthropic_keeps_every_marked_block_and_adds_the_instructions_after_them() -> None:
    sent = anthropic_sent()
    original = copy.deepcopy(sent)
    call = MESSAGES.summary_call(sent, "SUMMARIZE", 300)

    assert sent == original  # the sent body is not changed in place
    assert call["system"] == sent["system"] and call["tools"] == sent["tools"]
    assert call["messages"][:2] == sent["messages"][:2]
    last = call["messages"][2]
    assert last["content"][:2] == sent["messages"][2]["content"]  # the client's mark stays put
    assert last["content"][2] == {"type": "text", "text": "SUMMARIZE"}
    assert call["max_tokens"] == 300 and "stream" not in call
    assert call["tool_choice"] == {"type": "none"}


def test_anthropic_after_an_assistant_turn_gets_a_user_message_of_its_own() -> None:
    sent = anthropic_sent()
    sent["messages"] = sent["messages"][:2]
    call = MESSAGES.summary_call(sent, "SUMMARIZE", 300)
    assert call["messages"][:2] == sent["messages"]
    assert call["messages"][2] == {
        "role": "user",
        "content": [{"type": "text", "text": "SUMMARIZE"}],
    }


def test_chat_appends_one_user_message_and_drops_what_cannot_go_on() -> None:
    sent = {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 9000,
        "n": 2,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "prompt_cache_key": "cpx-1",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
    }
    call = CHAT.summary_call(sent, "SUMMARIZE", 300)
    assert call["messages"] == [*sent["messages"], {"role": "user", "content": "SUMMARIZE"}]
    assert call["prompt_cache_key"] == "cpx-1"  # the same cache bucket
    assert call["tool_choice"] == "none" and call["max_completion_tokens"] == 300
    assert not {"stream", "stream_options", "max_tokens", "n"} & call.keys()
    answer = {"choices": [{"message": {"role": "assistant", "content": "the summary"}}]}
    assert CHAT.answer_text(answer) == "the summary"


def test_responses_makes_none() -> None:
    assert RESPONSES.summary_call({"model": "m", "input": []}, "SUMMARIZE", 300) is None


def test_the_prefix_is_cheaper_unless_the_summarizer_model_is_much_cheaper() -> None:
    gpt41 = Price(input=2.0, cached_input=0.5, cache_write=2.0, output=8.0)
    nano = Price(input=0.1, cached_input=0.025, cache_write=0.1, output=0.4)
    assert prefix_is_cheaper(80_000, gpt41, gpt41, summary_tokens=1024)
    assert not prefix_is_cheaper(80_000, gpt41, nano, summary_tokens=1024)
