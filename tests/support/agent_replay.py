"""Replaying an agent's session (tests/support/agent_history.py) through a real proxy, one
request after another, with each API's official client, the proxy settled after each request
(an agent whose tools take longer than a summary): what each answer said and what the provider's
prompt held instead of the client's turns (a summary, stubs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anthropic

from proxy.core.clearing import CLEARED_STUB
from tests.support.agent_history import (
    TOOLS,
    anthropic_tools,
    as_anthropic,
    as_responses,
    requests,
    responses_tools,
)
from tests.support.clients import KEY, openai_client
from tests.support.config import SUMMARIZER_MODEL, summarizing
from tests.support.drivers import Entry, Providers, anthropic_view, chat_view, responses_view
from tests.support.mock_upstream import MockUpstream
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

CONVERSATION = "agent-session"
STUB = CLEARED_STUB.split("{")[0]


class Replay:
    """Sends one request of the session through one route with its official client."""

    label = ""  # the route's label in the proxy's metrics
    path = ""
    view: Callable[[dict[str, Any]], list[Entry]] = staticmethod(chat_view)

    def __init__(self, server: ThreadedUvicorn) -> None:
        self.server = server

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        raise NotImplementedError


class ChatReplay(Replay):
    label, path = "chat", "/v1/chat/completions"

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        client = openai_client(self.server, CONVERSATION)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=prefix, tools=TOOLS
        )
        return dict(raw.headers)


class ResponsesReplay(Replay):
    label, path = "responses", "/v1/responses"
    view = staticmethod(responses_view)

    def send(self, prefix: list[dict[str, Any]]) -> dict[str, str]:
        client = openai_client(self.server, CONVERSATION)
        raw = client.responses.with_raw_response.create(
            model="gpt-4o", tools=responses_tools(), store=False, **as_responses(prefix)
        )
        return dict(raw.headers)


class AnthropicReplay(Replay):
    label, path = "messages", "/v1/messages"
    view = staticmethod(anthropic_view)

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


ROUTES: dict[str, Callable[[ThreadedUvicorn], Replay]] = {
    "chat": ChatReplay,
    "responses": ResponsesReplay,
    "anthropic": AnthropicReplay,
}


@dataclass
class Replayed:
    """What a replay saw: each answer's headers, what each provider prompt held instead of the
    client's turns, and the summaries made before the last request (the one made after it would
    serve the next)."""

    seen: list[dict[str, str]]
    holds: list[set[str]]
    summaries: int
    url: str = ""  # the proxy's


def replay(
    mock: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
    route: str,
    policy: Mapping[str, Any],
    history: list[dict[str, Any]],
    *,
    summary_padding: str = "",
    **sections: Any,
) -> Replayed:
    """Each request of ``history`` in order through a proxy whose default policy is ``policy``
    (ahead mode unless it says otherwise), the proxy settled after each."""
    providers = Providers(mock)
    providers.chat.summary_padding = summary_padding
    url = mock.url
    mode = policy.get("mode", "ahead")
    server = start_proxy(
        summarizing(url, policy=policy, mode=mode, upstream={"anthropic_base_url": url}, **sections)
    )
    replayer = ROUTES[route](server)
    out = Replayed([], [], 0, server.url)
    for n, prefix in enumerate(requests(history), start=1):
        mark = len(mock.received)
        out.summaries = providers.summaries
        out.seen.append(replayer.send(prefix))
        bodies = [
            r.json()
            for r in mock.received[mark:]
            if r.path == replayer.path and r.json().get("model") != SUMMARIZER_MODEL
        ]
        assert len(bodies) == 1
        entries = replayer.view(bodies[0])
        held = {"summary"} if any(e.kind == "summary" for e in entries) else set()
        if any(e.kind == "result" and e.text.startswith(STUB) for e in entries):
            held.add("stubs")
        out.holds.append(held)
        settle(server.url, route=replayer.label, answered=n)
    return out
