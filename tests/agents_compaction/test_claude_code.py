"""Claude Code's own compaction (``/compact``, or its context filling up), as it sends it: the
whole history and one more user message carrying its summary prompt. Where the proxy already
holds a summary of that history, it answers at once with it, in the form Claude Code parses
(``<summary>...</summary>`` in an assistant text); the provider receives nothing."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.clients import admin_get
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

KEY = "sk-ant-caller-one"
MODEL = "claude-mock-1"
SYSTEM = [{"type": "text", "text": "You are a careful coding agent."}]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
# Claude Code 2.1.197's compaction request ends so (its text-only preamble, then the prompt).
NO_TOOLS = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n"
    "- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or ANY other tool.\n"
)
PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions.\nThis summary should "
    "be thorough ...\n<summary>\n1. Primary Request and Intent:\n   [Detailed description]\n"
    "</summary>\n</example>\n\nPlease provide your summary based on the conversation so far."
)
RECENT_PROMPT = (
    "Your task is to create a detailed summary of the RECENT portion of the conversation - the "
    "messages that follow earlier retained context."
)

pytestmark = pytest.mark.usefixtures("tiktoken_files")


def client(server: ThreadedUvicorn, conversation: str = "cc-1") -> anthropic.Anthropic:
    return closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key=KEY,
            max_retries=0,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def run_session(sdk: anthropic.Anthropic, steps: int) -> list[dict[str, Any]]:
    """A coding session of ``steps`` user turns of two tool rounds each; its history."""
    history: list[dict[str, Any]] = []
    for n in range(steps):
        history.append({"role": "user", "content": [{"type": "text", "text": f"Step {n} TOOL"}]})
        for done in (1, 2):
            reply = sdk.messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=history, tools=TOOLS
            )
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            if reply.stop_reason != "tool_use":
                break
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": b.id,
                    "content": "".join(f"\nline {i}: x = {i * n}" for i in range(12))
                    + (" LAST" if done == 2 else ""),
                }
                for b in reply.content
                if b.type == "tool_use"
            ]
            history.append({"role": "user", "content": results})
        if history[-1]["role"] == "user":  # the round after LAST answers in text
            reply = sdk.messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=history, tools=TOOLS
            )
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
    return history


def compaction_request(history: list[dict[str, Any]], prompt: str = PROMPT) -> list[dict[str, Any]]:
    return [*history, {"role": "user", "content": [{"type": "text", "text": NO_TOOLS + prompt}]}]


def test_claude_codes_compaction_is_answered_from_the_ready_summary(
    serve, messages_provider: AnthropicProvider, summarizer
) -> None:
    server = serve()
    sdk = client(server)
    history = run_session(sdk, 6)
    before = len(messages_provider.requests())
    summaries = summarizer.summaries
    assert summaries >= 1

    raw = sdk.messages.with_raw_response.create(
        model=MODEL, max_tokens=20000, system=SYSTEM, messages=compaction_request(history)
    )

    assert len(messages_provider.requests()) == before  # the provider received nothing
    assert summarizer.summaries == summaries  # and no summary was made for it
    assert raw.headers["x-compaction"] == "answered"
    reply = raw.parse()
    assert reply.role == "assistant" and reply.stop_reason == "end_turn"
    text = reply.content[0].text
    assert text.startswith("<summary>") and text.rstrip().endswith("</summary>")
    assert text.count("</summary>") == 1
    stored = admin_get(server, "/conversations/cc-1", key=KEY).json()["checkpoints"][0]
    assert stored["summary"] in text
    assert raw.headers["x-compaction-checkpoint"] == stored["id"]


def test_a_streamed_compaction_is_answered_as_the_sdk_reads_a_stream(
    serve, messages_provider: AnthropicProvider, summarizer
) -> None:
    server = serve()
    sdk = client(server, "cc-stream")
    history = run_session(sdk, 6)
    before = len(messages_provider.requests())

    with sdk.messages.stream(
        model=MODEL, max_tokens=20000, system=SYSTEM, messages=compaction_request(history)
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert len(messages_provider.requests()) == before
    assert text.startswith("<summary>") and "SUMMARY-" in text
    assert final.content[0].text == text and final.stop_reason == "end_turn"


def test_what_the_summary_does_not_cover_is_forwarded(
    serve, messages_provider: AnthropicProvider, summarizer
) -> None:
    server = serve()
    sdk = client(server, "cc-forward")
    history = run_session(sdk, 6)
    before = len(messages_provider.requests())
    # The portion-only variant asks for a summary of recent turns: not what the proxy holds.
    raw = sdk.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=2000,
        system=SYSTEM,
        messages=compaction_request(history, RECENT_PROMPT),
    )
    assert len(messages_provider.requests()) == before + 1
    assert raw.headers["x-compaction"] != "answered"
    # A conversation with no summary yet: forwarded as well.
    fresh = client(server, "cc-fresh")
    short = run_session(fresh, 1)
    raw = fresh.messages.with_raw_response.create(
        model=MODEL, max_tokens=2000, system=SYSTEM, messages=compaction_request(short)
    )
    assert raw.headers["x-compaction"] != "answered"
    assert "Your task is to create" in json.dumps(messages_provider.requests()[-1]["messages"][-1])
