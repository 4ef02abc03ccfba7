"""Shapes a client or a model may send that recall must survive: an old tool call whose arguments
nest a thousand deep or whose ``function`` is not an object (the client's history), a recall call
whose arguments nest a thousand deep and a client tool_use whose input does (the model's answer).
Each is a valid request or a provider's answer: never a proxy 500. What recall cannot read of an
answer is relayed as it came."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.clients import openai_client
from tests.support.config import merged, summarizing
from tests.support.deep_model import AFTER, DEEP, DEPTH, DeepModel, answered_bytes
from tests.support.dialect_streams import response_body, responses_stream, responses_text_item
from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply, sse_reply
from tests.support.provider import SYSTEM, take_turn
from tests.support.recall_histories import anthropic_history, chat_history, responses_history
from tests.support.recall_model import TOOL
from tests.support.recall_provider import CLEARING, RecallProvider, recall_results
from tests.support.sdk_clients import closed_after_test

PLACEHOLDER = "DEEP-INPUT-HERE"
BIG = "\nthe config\n" + "a line of the config file\n" * 80


# --- the client's history (chat, Responses) --------------------------------------------------


ODD_CALLS = {
    "deep arguments": {
        "id": "call_odd",
        "type": "function",
        "function": {"name": "read_file", "arguments": DEEP},
    },
    "custom, function a string": {
        "id": "call_odd",
        "type": "custom",
        "custom": {"name": "shell", "input": "ls"},
        "function": "shell",
    },
    "custom, function a list": {
        "id": "call_odd",
        "type": "custom",
        "custom": {"name": "shell", "input": "ls"},
        "function": ["shell"],
    },
}


@pytest.mark.parametrize("call", ODD_CALLS.values(), ids=list(ODD_CALLS))
def test_an_old_tool_call_of_any_shape_leaves_every_turn_served(mock, start_proxy, call):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "odd-call")
    history: list[dict[str, Any]] = [
        SYSTEM,
        {"role": "user", "content": "look around"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_odd", "content": BIG},
        {"role": "assistant", "content": "looked"},
    ]
    for turn in range(4):  # the odd call's result gets old enough to be stubbed
        take_turn(client, history, f"Question {turn}: and then?")
    sent = json.dumps(provider.chat_requests()[-1]["messages"])
    assert "recall id r" in sent  # its result was stubbed and named: the notes read the call


def _responses_model(request: Received) -> Reply:
    item = responses_text_item("ok")
    if request.json().get("stream"):
        return sse_reply(responses_stream([item]))
    return json_reply(response_body([item]))


def test_an_old_responses_call_with_deep_arguments_is_served(mock, start_proxy):
    mock.default = _responses_model
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "odd-responses")
    items = responses_history(BIG, "and now?")
    items[1]["arguments"] = DEEP
    for _ in range(2):  # the history keeps the call: every later turn carries it
        assert client.responses.create(model="gpt-4o", input=items).output_text == "ok"
    sent = [r.json() for r in mock.received if r.path.endswith("/responses")][-1]
    assert "recall id r" in json.dumps(sent["input"])


# --- the model's answer: a call nested a thousand deep ----------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chat_recall_call_nested_deep_is_answered_as_a_call_without_an_id(
    mock, start_proxy, stream
):
    mock.default = DeepModel()
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, f"deep-recall-chat-{stream}")
    history = chat_history(BIG, "go")
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        text = reply.choices[0].message.content
    assert text == AFTER
    again = mock.chat_requests()[-1].json()
    assert [r.startswith("No recall id given") for r in recall_results(again)] == [True]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_responses_recall_call_nested_deep_is_answered(mock, start_proxy, stream):
    mock.default = DeepModel()
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, f"deep-recall-responses-{stream}")
    items = responses_history(BIG, "what is the port?")
    if stream:
        events = list(client.responses.create(model="gpt-4o", input=items, stream=True))
        final = next(e.response for e in events if e.type == "response.completed")
    else:
        final = client.responses.create(model="gpt-4o", input=items)
    assert final.output_text == AFTER
    again = [r.json() for r in mock.received if r.path.endswith("/responses")][-1]
    assert again["input"][-1]["output"].startswith("No recall id given")


@pytest.fixture
def anthropic_proxy(mock: MockUpstream, second_mock: MockUpstream, start_proxy):
    sections = merged({"upstream": {"anthropic_base_url": second_mock.url}})
    return start_proxy(summarizing(mock.url, policy=CLEARING, **sections))


@pytest.mark.parametrize("name", ["read_file", TOOL], ids=["client tool", "recall"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_anthropic_tool_use_nested_deep_never_makes_a_500(
    anthropic_proxy, second_mock, stream, name
):
    second_mock.default = model = DeepModel(name)
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=anthropic_proxy.url,
            api_key="sk-ant-test",
            max_retries=0,
            default_headers={"X-Conversation-Id": f"deep-anthropic-{stream}-{name}"},
        )
    )
    raw = client.messages.with_raw_response.create(
        model="claude-x", max_tokens=100, messages=anthropic_history(BIG, "go"), stream=stream
    )
    assert raw.status_code == 200
    got = raw.http_response.read()
    asked = [r for r in second_mock.received if r.path.endswith("/messages")]
    if name == "read_file" or not stream:
        # Not readable (a body nested past what recall reads) or not a recall: as it came.
        assert got == answered_bytes(model(asked[0]))
    else:  # streamed, the input came as text: a recall call without a readable id, answered
        assert AFTER.encode() in got and TOOL.encode() not in got
        results = asked[-1].json()["messages"][-1]["content"]
        assert results[0]["content"].startswith("No recall id given")


def test_an_old_anthropic_tool_use_nested_deep_is_never_a_500(anthropic_proxy, second_mock):
    """A client's own tool_use, its input nested deep: served to 300 levels; at a thousand, past
    what the proxy can write again to hash it, a 400 in Anthropic's shape like any body nested
    too deeply (posted raw: the SDK's own json cannot write it)."""
    second_mock.default = DeepModel()
    statuses = {}
    for depth in (300, DEPTH):
        history = anthropic_history(BIG, "and now?")
        history[1]["content"][0]["input"] = PLACEHOLDER
        body = json.dumps({"model": "claude-x", "max_tokens": 10, "messages": history})
        response = httpx.post(
            f"{anthropic_proxy.url}/v1/messages",
            content=body.replace(f'"{PLACEHOLDER}"', "[" * depth + "]" * depth),
            headers={
                "x-api-key": "sk-ant-test",
                "anthropic-version": "2023-06-01",
                "x-conversation-id": f"old-deep-{depth}",
                "content-type": "application/json",
            },
        )
        statuses[depth] = response.status_code
        if response.status_code == 400:
            assert response.json()["error"]["type"] == "invalid_request_error"
    assert statuses == {300: 200, DEPTH: 400}
