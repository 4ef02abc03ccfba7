"""Coding agents name their sessions in headers of their own; with every default, each session is
a conversation of its own, with no header the user had to add. Through a real proxy."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from proxy.config.store import ConversationSettings
from tests.support.anthropic_provider import AnthropicProvider
from tests.support.claude_code import KEY as CLAUDE_KEY
from tests.support.claude_code import run_session
from tests.support.clients import KEY, admin_view, openai_client
from tests.support.config import AGENT_RUN, EVERY_THREE_INTERACTIONS, config, summarizing
from tests.support.provider import SUMMARIZER_MODEL, SYSTEM, Provider, take_turn
from tests.support.sdk_clients import closed_after_test

# The header each agent's current release sends on every model request, as captured from it
# (Claude Code 2.1.197, Codex CLI 0.171.0, opencode 1.18.33).
AGENT_HEADERS = {
    "claude-code": "X-Claude-Code-Session-Id",
    "codex": "thread-id",
    "opencode": "x-session-id",
}


def converse(server, headers: dict[str, str], turns: int = 4) -> list[str]:
    """``turns`` user turns from a client sending ``headers`` and no X-Conversation-Id; the
    X-Compaction answers."""
    client = openai_client(server, conversation=None, headers=headers)
    history = [SYSTEM]
    outcomes = []
    for turn in range(turns):
        outcomes += [h["x-compaction"] for h in take_turn(client, history, f"Step {turn}")]
    return outcomes


def checkpoints(server, conversation: str, *, key: str = KEY) -> int:
    """How many checkpoints the store holds for ``conversation`` (the admin API's view)."""
    return len(admin_view(server, conversation, key=key).get("checkpoints", []))


@pytest.mark.parametrize("agent", sorted(AGENT_HEADERS))
def test_each_agent_session_is_its_own_conversation(
    agent: str, mock, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    header = AGENT_HEADERS[agent]
    first = converse(server, {header: f"{agent}-session-1"})
    second = converse(server, {header: f"{agent}-session-2"}, turns=2)

    assert "off" not in first + second
    assert checkpoints(server, f"{agent}-session-1") >= 1
    # The second session's two turns never reach the trigger: nothing of the first is applied.
    assert "applied" not in second and checkpoints(server, f"{agent}-session-2") == 0
    # The agent's own header still reaches the provider: it is the agent's, not the proxy's.
    agent_requests = [r for r in mock.chat_requests() if r.json()["model"] != SUMMARIZER_MODEL]
    assert all(r.headers.get(header.lower()) for r in agent_requests)


def test_codex_thread_id_wins_over_its_session_id(mock, provider: Provider, start_proxy) -> None:
    """A Codex sub-agent runs its own thread (its own history) inside the parent's session."""
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    converse(server, {"session-id": "parent", "thread-id": "sub-agent"})
    assert checkpoints(server, "sub-agent") >= 1 and checkpoints(server, "parent") == 0


def test_x_conversation_id_overrides_the_agent_header(
    mock, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    converse(server, {"X-Conversation-Id": "mine", "X-Claude-Code-Session-Id": "agents"})
    assert checkpoints(server, "mine") >= 1 and checkpoints(server, "agents") == 0
    # The proxy's own header is not forwarded; the agent's is.
    sent = mock.chat_requests()[-1].headers
    assert "x-conversation-id" not in sent and sent["x-claude-code-session-id"] == "agents"


def test_a_single_configured_header_is_the_only_one_read(
    mock, provider: Provider, start_proxy
) -> None:
    """``conversation.header`` as a string (the files written before it took a list) names the
    one header read: an agent's session header is then not a conversation id."""
    settings = summarizing(
        mock.url, policy=EVERY_THREE_INTERACTIONS, conversation={"header": "X-Session"}
    )
    server = start_proxy(settings)
    assert set(converse(server, {"X-Claude-Code-Session-Id": "s"}, turns=2)) == {"off"}
    converse(server, {"X-Session": "s"})
    assert checkpoints(server, "s") >= 1


def test_the_header_setting_takes_a_string_or_a_list() -> None:
    assert ConversationSettings(header="X-Session").header == ("X-Session",)
    assert ConversationSettings(header=["a", "b"]).header == ("a", "b")
    defaults = ConversationSettings().header
    assert defaults[0] == "X-Conversation-Id"
    assert {"X-Claude-Code-Session-Id", "thread-id", "session-id", "x-session-id"} <= set(defaults)
    with pytest.raises(ValueError):
        ConversationSettings(header=[])


def test_head_of_the_root_answers_200_with_no_body(mock, start_proxy) -> None:
    """Claude Code probes ``HEAD /`` at start-up to see the base URL answers."""
    server = start_proxy(config(provider=mock.url))
    response = httpx.head(f"{server.url}/")
    assert response.status_code == 200 and response.content == b""
    assert mock.received == []


def test_an_agent_header_the_proxy_cannot_use_is_passed_over(
    mock, provider: Provider, start_proxy
) -> None:
    """An id of the proxy's own header that is not usable is the client's mistake (a 400); an
    agent's session header is not addressed to the proxy, so one it cannot use is passed over:
    the request is served uncompacted, or named by the next header."""
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    assert set(converse(server, {"X-Claude-Code-Session-Id": "has spaces"}, turns=2)) == {"off"}
    converse(server, {"thread-id": "not usable!", "session-id": "codex-session"})
    assert checkpoints(server, "codex-session") >= 1
    refused = httpx.post(
        f"{server.url}/v1/chat/completions",
        headers={"X-Conversation-Id": "has spaces", "authorization": "Bearer sk-caller-one"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_conversation_id"


def test_claude_code_sessions_on_the_messages_route(
    mock, second_mock, start_proxy, tiktoken_files
) -> None:
    """As Claude Code sends them: the anthropic SDK on /v1/messages, a session header and no
    other. Two sessions, two conversations; the caller's key reads them through the admin API."""
    AnthropicProvider(second_mock)
    Provider(mock)  # writes the summaries
    policy = {**AGENT_RUN, "trigger": {"input_tokens": 1200, "context_fraction": 0}}
    server = start_proxy(
        summarizing(mock.url, policy=policy, upstream={"anthropic_base_url": second_mock.url})
    )
    for session, steps in (("cc-session-a", 6), ("cc-session-b", 1)):
        sdk = closed_after_test(
            anthropic.Anthropic(
                base_url=server.url,
                api_key=CLAUDE_KEY,
                max_retries=0,
                default_headers={"X-Claude-Code-Session-Id": session},
            )
        )
        run_session(sdk, steps)
    assert checkpoints(server, "cc-session-a", key=CLAUDE_KEY) >= 1
    assert checkpoints(server, "cc-session-b", key=CLAUDE_KEY) == 0
