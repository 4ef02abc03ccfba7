"""Once a summary is in use, every later request of the conversation applies it or a newer one
(issue 28). With ``summarize`` plus ``clear_tool_results`` (config/examples/coding-agent.yaml), a
new summary used to go out on about two requests; then the answers still said ``applied``, but
the provider got the whole history with stubs and no ``<agent_summary>``, a new summary was paid
for, and the cycle repeated.

An append-only 40-round session over this repository's files (tests/support/agent_history.py)
is replayed request by request through a real proxy with the recipe's policy at a low trigger,
with each API's official client; what is counted is what the provider received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from proxy.core.clearing import CLEARED_STUB
from tests.support.agent_history import (
    TOOLS,
    agent_history,
    anthropic_tools,
    as_anthropic,
    as_responses,
    requests,
    responses_tools,
)
from tests.support.clients import KEY, openai_client
from tests.support.config import summarizing
from tests.support.drivers import Providers, anthropic_view, chat_view, responses_view
from tests.support.mock_upstream import MockUpstream
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

# The coding-agent recipe's policy, its token numbers scaled to a 50k-token session.
RECIPE: dict[str, Any] = {
    "strategy": "summarize",
    "trigger": {"input_tokens": 12000, "context_fraction": 0},
    "keep": {"tokens": 4000},
    "clear_tool_results": {
        "older_than_interactions": 2,
        "older_than_rounds": 5,
        "min_tokens": 300,
        "clear_at_least": 8000,
    },
    "pin": ['role == "user"', 'contains("#keep")'],
}
CONVERSATION = "agent-session"
STUB = CLEARED_STUB.split("{")[0]


class Replay:
    """Sends each request of the session through one route with its official client; returns
    the answer's headers and the provider's view of what it received."""

    label = ""
    path = ""

    def __init__(self, server: ThreadedUvicorn) -> None:
        self.server = server

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        raise NotImplementedError

    def view(self, body: dict[str, Any]) -> list[Any]:
        raise NotImplementedError


class ChatReplay(Replay):
    label, path = "chat", "/v1/chat/completions"

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        client = openai_client(self.server, CONVERSATION)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=prefix, tools=TOOLS
        )
        return dict(raw.headers)

    def view(self, body: dict[str, Any]) -> list[Any]:
        return chat_view(body)


class ResponsesReplay(Replay):
    label, path = "responses", "/v1/responses"

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        client = openai_client(self.server, CONVERSATION)
        raw = client.responses.with_raw_response.create(
            model="gpt-4o", tools=responses_tools(), store=False, **as_responses(prefix)
        )
        return dict(raw.headers)

    def view(self, body: dict[str, Any]) -> list[Any]:
        return responses_view(body)


class AnthropicReplay(Replay):
    label, path = "messages", "/v1/messages"

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        client = closed_after_test(
            anthropic.Anthropic(
                base_url=self.server.url,
                api_key=KEY,
                max_retries=0,
                default_headers={"X-Conversation-Id": CONVERSATION},
            )
        )
        raw = client.messages.with_raw_response.create(
            model="claude-mock-1", max_tokens=256, tools=anthropic_tools(), **as_anthropic(prefix)
        )
        return dict(raw.headers)

    def view(self, body: dict[str, Any]) -> list[Any]:
        return anthropic_view(body)


ROUTES: dict[str, Callable[[ThreadedUvicorn], Replay]] = {
    "chat": ChatReplay,
    "responses": ResponsesReplay,
    "anthropic": AnthropicReplay,
}


def replay(
    mock: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
    route: str,
    policy: dict,
    *,
    summary_padding: str = "",
) -> tuple[list[dict[str, str]], list[set[str]], int]:
    """Each request of the session in order, the proxy settled after each (an agent whose tools
    take longer than a summary); the answers' headers, per request what the provider's body held
    instead of the client's turns (a summary, stubs), and the summaries made before the last request (the one made after it
    would serve the next)."""
    providers = Providers(mock)
    providers.chat.summary_padding = summary_padding
    url = mock.url
    server = start_proxy(
        summarizing(url, policy=policy, mode="ahead", upstream={"anthropic_base_url": url})
    )
    replayer = ROUTES[route](server)
    seen: list[dict[str, str]] = []
    holds: list[set[str]] = []
    for n, prefix in enumerate(requests(agent_history(40)), start=1):
        mark = len(mock.received)
        made_before_last = providers.summaries
        seen.append(replayer.send(prefix))
        bodies = [
            r.json()
            for r in mock.received[mark:]
            if r.path == replayer.path and r.json().get("model") != "mock-summarizer"
        ]
        assert len(bodies) == 1
        entries = replayer.view(bodies[0])
        held = {"summary"} if any(e.kind == "summary" for e in entries) else set()
        if any(e.kind == "result" and e.text.startswith(STUB) for e in entries):
            held.add("stubs")
        holds.append(held)
        settle(server.url, route=replayer.label, answered=n)
    return seen, holds, made_before_last


# A summary as long as a real one (about 1.5k tokens): longer than the stubs of the turns it
# covers once their results are cleared.
LONG_SUMMARY = " Files read: proxy/core/planner.py, proxy/core/clearing.py." * 120


@pytest.mark.parametrize(
    ("route", "padding"),
    [("chat", ""), ("responses", ""), ("anthropic", ""), ("chat", LONG_SUMMARY)],
    ids=["chat", "responses", "anthropic", "chat-long-summary"],
)
def test_a_summary_in_use_is_applied_to_every_later_request(
    mock, start_proxy, tiktoken_files, route: str, padding: str
) -> None:
    seen, holds, made = replay(mock, start_proxy, route, RECIPE, summary_padding=padding)
    with_summary = ["summary" in held for held in holds]

    first = with_summary.index(True)  # the session outgrows the trigger: a summary is used
    dropped = [n for n, held in enumerate(with_summary) if n > first and not held]
    assert dropped == [], f"requests after the first summary without one: {dropped}"
    for n in range(first, len(seen)):
        assert seen[n]["x-compaction"] == "applied"
        assert seen[n]["x-compaction-checkpoint"], n
    # Each summary made is used: none paid for and thrown away.
    assert made == len({h["x-compaction-checkpoint"] for h in seen[first:]})
    # The answer says what the provider's prompt held, without reading bodies.
    said = [set(filter(None, h.get("x-compaction-applied", "").split("+"))) for h in seen]
    assert said == holds
    assert {"summary", "stubs"} in holds  # the recipe's both, at once
