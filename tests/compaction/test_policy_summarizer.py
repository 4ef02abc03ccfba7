"""A policy's own summarizer: its `summarizer:` keys override the global ones, checked
by what each summarizer endpoint received, through the real proxy and the official client."""

from __future__ import annotations

import json

import pytest

from proxy.config.settings import Settings
from tests.support.clients import openai_client
from tests.support.config import COMPACTING, EVERY_THREE_INTERACTIONS, config
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider, check_sent, talk


@pytest.fixture
def other(second_mock: MockUpstream) -> MockUpstream:
    """A second provider: the endpoint one policy's summarizer speaks to (it echoes)."""
    return second_mock


def two_summarizers(provider: str, other_url: str) -> Settings:
    """The global summarizer, and policy ``own`` with one of its own at ``other_url``."""
    own = {
        "base_url": f"{other_url}/v1",
        "api_key": "sk-policy-summarizer",
        "model": "$request",
        "max_summary_tokens": 77,
        "prompt": "POLICY-PROMPT",
        "instructions": "Answer in French.",
        "cod_max_loops": 2,
        "final_prompt": "Notes so far: {summary}",
    }
    return config(
        COMPACTING,
        provider=provider,
        summarizer={"max_summary_tokens": 300, "instructions": "GLOBAL-INSTRUCTIONS"},
        policies={
            "default": EVERY_THREE_INTERACTIONS,
            "own": {**EVERY_THREE_INTERACTIONS, "summarizer": own},
        },
    )


def test_each_policy_summarizes_with_its_own_settings(
    mock: MockUpstream, other: MockUpstream, start_proxy
) -> None:
    provider = Provider(mock)
    server = start_proxy(two_summarizers(mock.url, other.url))

    talk(openai_client(server, "plain", headers={"X-Compaction-Policy": "default"}), 6)
    calls = provider.summary_requests()
    assert calls and not other.received  # the global summarizer: the upstream, its model
    for call in calls:
        assert call["max_tokens"] == 300
        assert call["messages"][0]["content"].count("GLOBAL-INSTRUCTIONS") == 1
    assert provider.chat_requests()[-1]["messages"][1]["content"].startswith(
        "<agent_summary>\nThis is a summary of the earlier part"
    )

    before = len(calls)
    own = openai_client(server, "custom", headers={"X-Compaction-Policy": "own"})
    history = talk(own, 6)
    assert len(provider.summary_requests()) == before  # none of its summaries went upstream
    received = other.chat_requests()
    assert received
    for request in received:
        assert request.headers["authorization"] == "Bearer sk-policy-summarizer"
        body = request.json()
        assert body["model"] == "gpt-4o"  # $request: the model the client asked for
        assert body["max_tokens"] == 77
        assert "GLOBAL-INSTRUCTIONS" not in json.dumps(body)
    first = received[0].json()["messages"][0]["content"]
    assert first.startswith("POLICY-PROMPT\n\nAnswer in French.")
    # Chain of Density: the first summary is followed by a refinement pass over it.
    assert "informative entities" in received[1].json()["messages"][0]["content"]
    sent = provider.chat_requests()[-1]["messages"]
    assert sent[1]["content"].startswith("<agent_summary>\nNotes so far: echo: ")
    check_sent(sent, history)

    # A client that echoes the custom-framed summary back never gets two of them.
    echoed = [*sent, {"role": "user", "content": "and now?"}]
    own.chat.completions.create(model="gpt-4o", messages=echoed)
    again = provider.chat_requests()[-1]["messages"]
    assert sum("<agent_summary>" in str(m.get("content")) for m in again) == 1
