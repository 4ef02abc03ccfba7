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

import copy
import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.dialects import test_anthropic_messages as messages_route
from tests.support.anthropic_provider import SUMMARY_OPEN, problems, summaries_in

KEY, MODEL = messages_route.KEY, messages_route.MODEL
SYSTEM, TOOLS, EXACT_COUNTS = (
    messages_route.SYSTEM,
    messages_route.TOOLS,
    messages_route.EXACT_COUNTS,
)
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


@pytest.mark.parametrize("named_by", ["header", "auto"])
def test_claude_codes_first_request_is_answered_with_its_system_message_in_place(
    serve, messages_provider, summarizer, named_by: str
) -> None:
    """With a conversation id, from the header or made up (``conversation.missing: auto``)."""
    server = serve(conversation={"missing": "auto"}) if named_by == "auto" else serve()
    headers = claude_code_headers("cc-1")
    if named_by == "auto":
        del headers["x-conversation-id"]
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": SKILLS},
    ]
    body = {"model": MODEL, "max_tokens": 64, "messages": messages}
    response = httpx.post(f"{server.url}/v1/messages?beta=true", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction"] == "skipped"  # planned: below the trigger
    assert response.json()["content"][0]["text"] == "done: saw 2 messages"
    received = messages_provider.requests()
    assert len(received) == 1 and problems(received[0]) == []
    assert received[0]["messages"] == messages
    assert messages_provider.mock.received[0].headers["anthropic-beta"] == BETAS


# Summarized past 1200 input tokens, the newest 500 kept, results older than 2 rounds stubbed.
POLICY = {**messages_route.POLICY, "clear_tool_results": {"older_than_rounds": 2}}
CHANGELOG = "The user sent the following message while you were working: update the changelog."


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "text": content}


class ClaudeCode:
    """Plays Claude Code on a model that takes system messages: the skills as a system message
    right after the first user turn, a system message after some tool results, tool rounds."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self.client = client
        self.history: list[dict[str, Any]] = []
        self.sent: list[list[dict[str, Any]]] = []
        self.outcomes: list[str] = []

    def turn(self, task: str, *, rounds: int, system: dict[str, Any] | None = None) -> None:
        """One user turn (``system`` right after it), a task of ``rounds`` tool rounds; after
        the second round's results, a system message relaying what the user typed meanwhile."""
        self.history.append({"role": "user", "content": [text(f"{task} TOOL")]})
        if system is not None:
            self.history.append(system)
        done = 0
        while True:
            sent = copy.deepcopy(self.history)
            raw = self.client.messages.with_raw_response.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=sent, tools=TOOLS
            )
            self.sent.append(sent)
            self.outcomes.append(raw.headers["x-compaction"])
            reply = raw.parse()
            content = [b.model_dump(exclude_none=True) for b in reply.content]
            self.history.append({"role": "assistant", "content": content})
            if reply.stop_reason != "tool_use":
                return
            done += 1
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": b["id"],
                    "content": "".join(f"line {i} of {b['id']}: x = {i}\n" for i in range(12))
                    + (" LAST" if done >= rounds else ""),
                }
                for b in content
                if b["type"] == "tool_use"
            ]
            self.history.append({"role": "user", "content": results})
            if done == 2:
                self.history.append({"role": "system", "content": [text(CHANGELOG)]})


def only(role: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == role]


def turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] != "system"]


def check_received(received: dict[str, Any], sent: list[dict[str, Any]]) -> None:
    """What the provider gets, next to what the client sent: a body the API accepts (system
    messages in their place, turns alternating, every tool_use answered next), every system
    message the client sent, byte for byte and in its order, the summary only in ``system``,
    and the turns a verbatim suffix of the client's (old tool results may be stubs) after at most
    the task sent again."""
    assert problems(received) == []
    messages = received["messages"]
    assert only("system", messages) == only("system", sent)
    assert SUMMARY_OPEN not in json.dumps(messages)
    assert len(summaries_in(received)) <= 1
    kept, had = turns(messages), [unstubbed(m) for m in turns(sent)]
    kept = [unstubbed(m) for m in kept]
    start = 0 if kept == had[len(had) - len(kept) :] else 1
    assert kept[start:] == had[len(had) - len(kept) + start :]
    assert messages[-1] == sent[-1]


def unstubbed(turn: dict[str, Any]) -> dict[str, Any]:
    """The turn with every tool result's content left out: the proxy may stub old ones."""
    content = turn["content"]
    if not isinstance(content, list):
        return turn
    return {
        **turn,
        "content": [
            {k: v for k, v in b.items() if k != "content"} if b["type"] == "tool_result" else b
            for b in content
        ],
    }


@EXACT_COUNTS
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_compacted_claude_code_session_keeps_its_system_messages_in_place(
    serve, messages_provider, summarizer, stream: bool
) -> None:
    server = serve(policy=POLICY)
    headers = {"X-Conversation-Id": "cc-run", "anthropic-beta": BETAS}
    client = messages_route.sdk(base_url=server.url, api_key=KEY, default_headers=headers)
    agent = ClaudeCode(client)
    agent.turn("Step 0: fix src/a.py", rounds=4, system={"role": "system", "content": SKILLS})
    for n in range(1, 5):
        agent.turn(f"Step {n}: fix src/m{n}.py", rounds=3)

    # The last turn: a question, a reminder after it, answered plain or as a stream.
    history = [*agent.history, {"role": "user", "content": "sum up"}]
    history.append({"role": "system", "content": [text("Answer in one line.")]})
    request = dict(model=MODEL, max_tokens=64, system=SYSTEM, messages=history, tools=TOOLS)
    if stream:
        with client.messages.stream(**request) as events:
            answer = "".join(events.text_stream)
    else:
        answer = client.messages.create(**request).content[0].text
    received = messages_provider.requests()
    assert answer == f"done: saw {len(received[-1]['messages'])} messages"

    for body, sent in zip(received, [*agent.sent, history], strict=True):
        check_received(body, sent)
    assert "applied" in agent.outcomes and "failed" not in agent.outcomes
    last = received[-1]["messages"]
    assert summaries_in(received[-1]) and len(last) < len(history) / 2
    # The skills, older than the cut, follow the first kept user turn; the rest stay in place.
    assert last[0]["role"] == "user" and last[0] != history[0]
    assert last[1] == {"role": "system", "content": SKILLS}
    assert last[-2:] == history[-2:]
    # Tool results were stubbed, never a system message; none reached the summarizer.
    assert "tool result cleared" in json.dumps(received[-1])
    transcript = json.dumps(summarizer.summary_requests())
    assert "Step 0" in transcript
    assert "skills are available" not in transcript and "changelog" not in transcript
