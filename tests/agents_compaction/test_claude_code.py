"""Claude Code's own compaction (``/compact``, or its context filling up), as it sends it: the
whole history and one more user message carrying its summary prompt. Where the proxy already
holds a summary of that history, it answers at once with it, in the form Claude Code parses
(``<summary>...</summary>`` in an assistant text); the provider receives nothing."""

from __future__ import annotations

import json

import anthropic
import pytest

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.claude_code import (
    KEY,
    MODEL,
    RECENT_PROMPT,
    SYSTEM,
    compaction_request,
    run_session,
)
from tests.support.clients import admin_get
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

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


def test_the_prompt_merged_after_tool_results_keeps_them_in_the_history(
    serve, messages_provider: AnthropicProvider, summarizer
) -> None:
    """Claude Code merges consecutive user messages: compacting in the middle of a task, its
    prompt follows the newest tool results in one message. Those results are history: the
    answer covers them, as the turns the summary does not, verbatim."""
    server = serve()
    sdk = client(server, "cc-merged")
    history = run_session(sdk, 6)
    tool_round = history[-3:-1]  # an assistant tool_use and its results, replayed as the newest
    asked = compaction_request([*history, *tool_round])
    merged = [
        *asked[:-2],
        {"role": "user", "content": [*asked[-2]["content"], *asked[-1]["content"]]},
    ]
    before = len(messages_provider.requests())

    raw = sdk.messages.with_raw_response.create(
        model=MODEL, max_tokens=20000, system=SYSTEM, messages=merged
    )

    assert len(messages_provider.requests()) == before
    assert raw.headers["x-compaction"] == "answered"
    text = raw.parse().content[0].text
    assert "The most recent turns, verbatim" in text and "LAST" in text


def test_the_fallback_request_on_another_system_prompt_is_forwarded(
    serve, messages_provider: AnthropicProvider, summarizer
) -> None:
    """Claude Code's second way of asking has its own system prompt: the stored summary's chain
    does not cover that history, so the proxy cannot be sure and forwards it."""
    server = serve()
    sdk = client(server, "cc-fallback")
    history = run_session(sdk, 6)
    before = len(messages_provider.requests())
    raw = sdk.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=2000,
        system="You are a helpful AI assistant tasked with summarizing conversations.",
        messages=compaction_request(history),
    )
    assert raw.headers["x-compaction"] != "answered"
    assert len(messages_provider.requests()) == before + 1
