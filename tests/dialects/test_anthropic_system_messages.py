"""``role: "system"`` messages inside ``messages`` on ``POST /v1/messages``, as Claude Code sends
them on models that take them (the ``mid-conversation-system-2026-04-07`` beta; the ``anthropic``
SDK's ``MessageParam`` role ``"system"``, content a string or text blocks): the list of skills
right after the first user turn, later ones after tool results.

A real proxy in front of the scripted Anthropic provider (tests/support/anthropic_provider.py),
which refuses what the API refuses, a system message out of its place included. What a user
notices: the request is answered; the provider gets every system message the client sent, byte
for byte and in order, never summarized or cleared; the summary sits in the top-level
``system``; turns still alternate and every tool_use is answered in the next message.
"""

from __future__ import annotations

import httpx

from tests.dialects import test_anthropic_messages as messages_route
from tests.support.anthropic_provider import problems

KEY, MODEL = messages_route.KEY, messages_route.MODEL
# The Anthropic route's fixtures: both upstreams, the scripted provider, the proxy in front.
anthropic_mock = messages_route.anthropic_mock
openai_mock = messages_route.openai_mock
summarizer = messages_route.summarizer
messages_provider = messages_route.messages_provider
serve = messages_route.serve

# What Claude Code 2.1 sends on its default model (its headers, as captured by its users).
BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,effort-2025-11-24"
)
SKILLS = "The following skills are available: pdf, xlsx, review. Agent types: general, explore."


def claude_code_headers(conversation: str) -> dict[str, str]:
    return {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": BETAS,
        "x-conversation-id": conversation,
        "content-type": "application/json",
    }


def test_claude_codes_first_request_is_answered_with_its_system_message_in_place(
    serve, messages_provider, summarizer
) -> None:
    server = serve()
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": SKILLS},
    ]
    body = {"model": MODEL, "max_tokens": 64, "messages": messages}
    response = httpx.post(
        f"{server.url}/v1/messages?beta=true", json=body, headers=claude_code_headers("cc-1")
    )
    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["text"] == "done: saw 2 messages"
    received = messages_provider.requests()
    assert len(received) == 1 and problems(received[0]) == []
    assert received[0]["messages"] == messages
    assert messages_provider.mock.received[0].headers["anthropic-beta"] == BETAS
