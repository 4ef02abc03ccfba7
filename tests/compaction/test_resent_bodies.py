"""A conversation's body sent again is parsed only past the history its last body held
(``proxy.core.resent``): what the provider receives is still what the client sent, turn
for turn, whoever sends it and however the history changed. Through a real proxy."""

from __future__ import annotations

import json

import httpx

from proxy.core import resent
from tests.support.anthropic_provider import AnthropicProvider
from tests.support.clients import KEY
from tests.support.config import config
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn

OTHER_KEY = "sk-caller-two"


def _turns(n: int, tag: str = "") -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You are terse."}]
    for i in range(n):
        # Long enough (over resent.FOLLOW_BYTES in all) for the proxy to follow the history.
        text = f"{tag}question {i}: why is caf\u00e9 \u2192 slow? " + "details " * 240
        out.append({"role": "user", "content": text})
        out.append({"role": "assistant", "content": f"{tag}answer {i}: the cache \U0001f600"})
    return out


def _send(
    server: ThreadedUvicorn, messages: list[dict], *, key: str = KEY, compact: bool = False
) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "messages": messages, "temperature": 0.2}
    raw = (
        json.dumps(body, separators=(",", ":"), ensure_ascii=False) if compact else json.dumps(body)
    )
    return httpx.post(
        f"{server.url}/v1/chat/completions",
        content=raw.encode(),
        headers={
            "Authorization": f"Bearer {key}",
            "X-Conversation-Id": "resent-1",
            "Content-Type": "application/json",
        },
        timeout=30,
    )


def _received(mock: MockUpstream) -> list[dict]:
    return mock.chat_requests()[-1].json()["messages"]


def test_every_change_to_a_history_sent_again_reaches_the_provider(
    mock: MockUpstream, proxy: ThreadedUvicorn
) -> None:
    history = _turns(12)
    sent = [
        history,
        [*history, {"role": "user", "content": "one more"}],  # appended
        [*history, {"role": "user", "content": "one more!"}],  # the last message changed
        [{"role": "system", "content": "You are kind."}, *history[1:]],  # the first changed
        history[:-4],  # shorter
        [*history[:5], {"role": "user", "content": "edited"}, *history[6:]],  # one in the middle
        [*history, {"role": "user", "content": "again"}],
    ]
    assert len(json.dumps(history[:-4])) > resent.FOLLOW_BYTES  # followed, every one
    for i, messages in enumerate(sent):
        answer = _send(proxy, messages, compact=i % 2 == 1)  # the client's spacing changes too
        assert answer.status_code == 200, answer.text
        assert _received(mock) == messages, i


def test_two_callers_naming_the_same_conversation_never_share_a_history(
    mock: MockUpstream, proxy: ThreadedUvicorn
) -> None:
    mine, theirs = _turns(10, "mine "), _turns(10, "theirs ")
    for step in range(3):
        for key, history in ((KEY, mine), (OTHER_KEY, theirs)):
            messages = [*history, {"role": "user", "content": f"step {step}"}]
            assert _send(proxy, messages, key=key).status_code == 200
            assert _received(mock) == messages


def test_a_bad_message_after_a_history_sent_again_is_still_refused(
    mock: MockUpstream, proxy: ThreadedUvicorn
) -> None:
    history = _turns(8)
    assert _send(proxy, history).status_code == 200
    bad = [*history, {"role": "user", "content": "fine"}, {"role": "wizard", "content": "x"}]
    answer = _send(proxy, bad)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "messages[18].role"
    assert len(mock.chat_requests()) == 1  # the refused request never reached the provider


def test_an_anthropic_message_after_a_history_sent_again_is_still_checked(
    mock: MockUpstream, second_mock: MockUpstream, start_proxy
) -> None:
    """Anthropic's checks of each message run on the messages past the history taken."""
    server = start_proxy(
        config(provider=mock.url, upstream={"anthropic_base_url": second_mock.url})
    )
    AnthropicProvider(second_mock)  # answers every request
    history = [
        m
        for i in range(6)
        for m in (
            {"role": "user", "content": f"q{i} " + "details " * 400},
            {"role": "assistant", "content": [{"type": "text", "text": f"a{i}"}]},
        )
    ]

    def post(messages: list[dict]) -> httpx.Response:
        body = {"model": "claude-x", "max_tokens": 64, "messages": messages}
        headers = {"x-api-key": "sk-ant-1", "X-Conversation-Id": "a-1", "anthropic-version": "1"}
        return httpx.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=30)

    assert post([*history, {"role": "user", "content": "go"}]).status_code == 200
    bad = [*history, {"role": "user", "content": "go"}, {"role": "assistant", "content": [{}]}]
    answer = post(bad)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("messages.13.content.0:")
    assert len(second_mock.received) == 1
