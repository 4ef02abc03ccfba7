"""The rules that recognise an agent's own compaction request, on bodies
(docs/agent-compaction.md)."""

from __future__ import annotations

import json

from proxy.compaction.agents.own_compaction import answers_compact
from proxy.dialects.claude_code_compact import CLAUDE_CODE
from proxy.dialects.codex_compact import CODEX
from tests.support.claude_code import NO_TOOLS, PROMPT, RECENT_PROMPT, compaction_request
from tests.support.codex import COMPACT_PROMPT, compaction_prompt

HISTORY = [
    {"role": "user", "content": "fix the tests"},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
]


def body(messages: list) -> dict:
    return {"model": "claude-x", "max_tokens": 100, "messages": messages}


def test_the_whole_history_prompts_are_recognised_and_removed() -> None:
    asked = body(compaction_request(HISTORY))
    assert CLAUDE_CODE.might_be(json.dumps(asked).encode())
    assert CLAUDE_CODE.history(asked) == body(HISTORY)
    as_string = body([*HISTORY, {"role": "user", "content": NO_TOOLS + PROMPT}])
    assert CLAUDE_CODE.history(as_string) == body(HISTORY)
    up_to = PROMPT.replace(
        "of the conversation so far, paying close attention to the user's explicit requests and "
        "your previous actions.",
        "of this conversation. This summary will be placed at the start of a continuing session;",
    )
    assert CLAUDE_CODE.history(body(compaction_request(HISTORY, up_to))) == body(HISTORY)


def test_what_is_not_a_whole_history_request_is_left_alone() -> None:
    assert CLAUDE_CODE.history(body(compaction_request(HISTORY, RECENT_PROMPT))) is None
    # The prompt's words without its answer format: a user quoting it, not Claude Code asking.
    quoted = PROMPT.split("\n")[0]
    assert CLAUDE_CODE.history(body([*HISTORY, {"role": "user", "content": quoted}])) is None
    # Not the last message, or not a user's: a conversation that goes on past it.
    asked = compaction_request(HISTORY)
    assert CLAUDE_CODE.history(body([*asked, HISTORY[1]])) is None
    assert CLAUDE_CODE.history(body(asked[-1:])) is None  # nothing before it to compact
    assert not CLAUDE_CODE.might_be(json.dumps(body(HISTORY)).encode())


def test_the_answer_holds_one_summary_whatever_its_text() -> None:
    reply = CLAUDE_CODE.reply(body(HISTORY), "did X </summary> then <Summary> Y", reply_id="msg_1")
    message = json.loads(reply.body)
    text = message["content"][0]["text"]
    assert text.startswith("<summary>\n") and text.endswith("\n</summary>")
    assert text.lower().count("<summary>") == 1 and text.lower().count("</summary>") == 1
    assert message["stop_reason"] == "end_turn" and message["model"] == "claude-x"


def test_the_proxy_answers_compact_itself_unless_the_upstream_is_openai() -> None:
    assert not answers_compact("https://api.openai.com/v1")
    for url in ("http://127.0.0.1:8000/v1", "https://api.anthropic.com/v1", "http://vllm:8000/v1"):
        assert answers_compact(url)


def test_codexs_prompt_is_recognised_only_as_the_last_user_message() -> None:
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    asked = {"model": "gpt-5.1-codex", "input": compaction_prompt(history)}
    assert CODEX.might_be(json.dumps(asked).encode())
    assert CODEX.history(asked) == {"model": "gpt-5.1-codex", "input": history}
    as_string = {"model": "m", "input": [*history, {"role": "user", "content": COMPACT_PROMPT}]}
    assert CODEX.history(as_string) == {"model": "m", "input": history}
    going_on = {"model": "m", "input": [*compaction_prompt(history), history[0]]}
    assert CODEX.history(going_on) is None
    quoted = {
        "model": "m",
        "input": [*history, {"role": "user", "content": "see: " + COMPACT_PROMPT}],
    }
    assert CODEX.history(quoted) is None
    assert CODEX.history({"model": "m", "input": compaction_prompt([])}) is None
