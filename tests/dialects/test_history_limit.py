"""server.max_messages on every dialect: a 413 that names the dialect's own history field, in its
error shape, and nothing forwarded."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.support.config import COMPACTING, config
from tests.support.responses_provider import ResponsesProvider
from tests.support.sdk_clients import closed_after_test

AT_MOST_THREE = {"server": {"max_messages": 3}}
HEADERS = {"X-Conversation-Id": "too-long"}
TURNS = [
    {"role": "user", "content": "one"},
    {"role": "assistant", "content": "two"},
    {"role": "user", "content": "three"},
    {"role": "assistant", "content": "four"},
    {"role": "user", "content": "five"},
]


def test_a_responses_input_over_the_limit_names_input(mock, start_proxy) -> None:
    ResponsesProvider(mock)
    server = start_proxy(config(COMPACTING, AT_MOST_THREE, provider=mock.url))
    api = closed_after_test(
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-one", max_retries=0)
    )
    with pytest.raises(openai.APIStatusError) as caught:
        api.responses.create(model="gpt-4o", input=TURNS, extra_headers=HEADERS)
    assert caught.value.status_code == 413
    assert caught.value.body["param"] == "input"
    assert "'input' holds 5 messages" in caught.value.body["message"]
    assert mock.received == []


def test_an_anthropic_conversation_over_the_limit_names_messages(mock, start_proxy) -> None:
    anthropic_upstream = {"anthropic_base_url": mock.url}
    server = start_proxy(
        config(COMPACTING, AT_MOST_THREE, provider=mock.url, upstream=anthropic_upstream)
    )
    api = closed_after_test(
        anthropic.Anthropic(base_url=server.url, api_key="sk-ant-one", max_retries=0)
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        api.messages.create(
            model="claude-mock-1", max_tokens=16, messages=TURNS, extra_headers=HEADERS
        )
    assert caught.value.status_code == 413
    body = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "request_too_large"
    assert "'messages' holds 5 messages" in body["error"]["message"]
    assert mock.received == []
