"""``X-Compaction-Focus`` through a real proxy: the summary made for the request is
asked to focus on it, in the summarizer's user message (its system message stays the same
bytes), the checkpoint records it for the admin API, the provider never sees the header, and a
bad value is a 400 in the dialect's error shape with nothing forwarded or stored.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from proxy.compaction.summaries.focus import MAX_CHARS
from tests.dialects.test_anthropic_messages import anthropic_client
from tests.support.clients import admin_get, admin_view, openai_client
from tests.support.config import EVERY_THREE_INTERACTIONS, summarizing
from tests.support.provider import SYSTEM, Provider, take_turn

FOCUS = "keep the database migration details"


def chat(client: openai.OpenAI, turns: int) -> None:
    history = [SYSTEM]
    for turn in range(turns):
        take_turn(client, history, f"Step {turn}: migrate table t{turn}. " + "Be thorough. " * 12)


def test_the_focus_reaches_the_summarizer_and_is_recorded_on_the_checkpoint(
    mock, start_proxy
) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    chat(openai_client(server, "focused", headers={"X-Compaction-Focus": FOCUS}), 5)
    chat(openai_client(server, "plain"), 5)

    focused, plain = provider.summary_requests()
    assert FOCUS in focused["messages"][1]["content"]  # the user-side instruction
    assert "focus" not in plain["messages"][1]["content"]
    # The system message is the same bytes with or without a focus (the provider caches it).
    assert focused["messages"][0] == plain["messages"][0]
    assert FOCUS not in focused["messages"][0]["content"]

    assert [c["focus"] for c in admin_view(server, "focused")["checkpoints"]] == [FOCUS]
    assert [c["focus"] for c in admin_view(server, "plain")["checkpoints"]] == [None]
    # Like every X-Compaction-* header, it is the proxy's: the provider never sees it.
    assert all("x-compaction-focus" not in r.headers for r in mock.chat_requests())


def test_a_focus_on_a_request_that_makes_no_summary_changes_nothing(mock, start_proxy) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    client = openai_client(server, "short", headers={"X-Compaction-Focus": FOCUS})
    chat(client, 2)  # below the trigger: no summary, so nothing to steer
    assert provider.summaries == 0
    assert admin_get(server, "/conversations/short").status_code == 404


@pytest.mark.parametrize(
    "value",
    [
        "x" * (MAX_CHARS + 1),  # too long
        "keep the migrations\tand the schema",  # a control character
        b"keep \xff\xfe",  # not UTF-8
    ],
)
def test_a_bad_focus_is_a_400_in_openais_shape_and_nothing_happens(
    mock, start_proxy, value: str | bytes
) -> None:
    Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    answer = httpx.post(
        f"{server.url}/v1/chat/completions",
        headers={
            "authorization": "Bearer sk-caller-one",
            "x-conversation-id": "bad-focus",
            "x-compaction-focus": value,
        },
        json={"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (
        "X-Compaction-Focus",
        "invalid_focus",
        "invalid_request_error",
    )
    assert mock.chat_requests() == []  # nothing forwarded, nothing summarized
    assert admin_get(server, "/conversations/bad-focus").status_code == 404


def test_the_official_client_gets_a_bad_request_error_for_a_long_focus(mock, start_proxy) -> None:
    Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    client = openai_client(server, "long", headers={"X-Compaction-Focus": "y" * 1000})
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hi"}]
        )
    assert "X-Compaction-Focus" in str(refused.value)
    assert mock.chat_requests() == []


def test_anthropic_messages_get_a_bad_focus_in_anthropics_error_shape(
    mock, second_mock, start_proxy
) -> None:
    settings = summarizing(
        mock.url,
        policy=EVERY_THREE_INTERACTIONS,
        upstream={"anthropic_base_url": second_mock.url},
    )
    server = start_proxy(settings)
    client = anthropic_client(server, "bad-focus")
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-mock-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Compaction-Focus": "z" * (MAX_CHARS + 1)},
        )
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "X-Compaction-Focus" in body["error"]["message"]
    assert second_mock.received == [] and mock.chat_requests() == []
