"""Fixtures of the agents' own compaction tests: a proxy in front of a scripted Anthropic
provider (its own port) and the OpenAI-compatible mock that writes the summaries and plays the
Responses provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.config import AGENT_RUN, merged, summarizing
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider
from tests.support.responses_provider import ResponsesProvider
from tests.support.servers import ThreadedUvicorn

# An agent run summarized past 1200 input tokens, its newest 500 tokens kept.
POLICY = {
    **AGENT_RUN,
    "trigger": {"input_tokens": 1200, "context_fraction": 0},
    "keep": {"tokens": 500},
}


@pytest.fixture
def messages_provider(second_mock: MockUpstream) -> AnthropicProvider:
    return AnthropicProvider(second_mock)


@pytest.fixture
def responses_provider(mock: MockUpstream) -> ResponsesProvider:
    """The Responses provider; its chat side writes the summaries."""
    return ResponsesProvider(mock)


@pytest.fixture
def serve(
    mock: MockUpstream, second_mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> Callable[..., ThreadedUvicorn]:
    """serve(**sections) -> a proxy: OpenAI upstream ``mock``, Anthropic ``second_mock``."""

    def start(*, policy: dict[str, Any] = POLICY, **sections: Any) -> ThreadedUvicorn:
        to_anthropic = {"upstream": {"anthropic_base_url": second_mock.url}}
        return start_proxy(summarizing(mock.url, policy=policy, **merged(to_anthropic, sections)))

    return start


@pytest.fixture
def summarizer(mock: MockUpstream) -> Provider:
    """The OpenAI-compatible mock writing numbered summaries (``SUMMARY-n``)."""
    return Provider(mock)
