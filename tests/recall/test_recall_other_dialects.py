"""The recall tool on /v1/messages (Anthropic's SDK) and /v1/responses (OpenAI's Responses API),
plain and streamed: the model's recall call is answered by the proxy in the dialect's own shape
and the client gets only the final answer."""

from __future__ import annotations

import json
import re

import anthropic
import pytest

from tests.support.anthropic_provider import message
from tests.support.clients import openai_client
from tests.support.config import merged, summarizing
from tests.support.dialect_streams import (
    anthropic_stream,
    response_body,
    responses_call_item,
    responses_stream,
    responses_text_item,
)
from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply, sse_reply
from tests.support.recall_histories import anthropic_history, responses_history
from tests.support.recall_model import TOOL
from tests.support.recall_provider import CLEARING
from tests.support.sdk_clients import closed_after_test

SECRET = "SECRET-4242"
BIG = f"header\nthe port is {SECRET}\n" + "a line of the config file\n" * 80
HANDLE = re.compile(r"recall id (r[a-z2-7]{10})")


def _found(request: Received) -> str | None:
    text = request.body.decode()
    return "found: the port is " + SECRET if f"is {SECRET}" in text else None


# --- Anthropic ------------------------------------------------------------------------------


def _anthropic_model(request: Received) -> Reply:
    body = request.json()
    found = _found(request)
    handles = HANDLE.findall(request.body.decode())
    offered = any(t.get("name") == TOOL for t in body.get("tools") or [])
    if found is not None or not handles or not offered:
        blocks = [{"type": "text", "text": found or "I don't know."}]
    else:
        blocks = [{"type": "tool_use", "id": "toolu_r", "name": TOOL, "input": {"id": handles[0]}}]
    if body.get("stream"):
        return sse_reply(anthropic_stream(blocks))
    stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
    return json_reply(message(blocks, model=body["model"], stop=stop))


@pytest.fixture
def anthropic_proxy(mock: MockUpstream, second_mock: MockUpstream, start_proxy):
    second_mock.default = _anthropic_model
    sections = merged({"upstream": {"anthropic_base_url": second_mock.url}})
    return start_proxy(summarizing(mock.url, policy=CLEARING, **sections))


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_recall_is_answered_with_a_tool_result(anthropic_proxy, second_mock, stream):
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=anthropic_proxy.url,
            api_key="sk-ant-test",
            max_retries=0,
            default_headers={"X-Conversation-Id": f"anthropic-{stream}"},
        )
    )
    options = dict(
        model="claude-x", max_tokens=100, messages=anthropic_history(BIG, "what is the port?")
    )
    if stream:
        with client.messages.stream(**options) as events:
            text = "".join(events.text_stream)
            final = events.get_final_message()
    else:
        final = client.messages.create(**options)
        text = final.content[0].text
    assert text == f"found: the port is {SECRET}"
    assert [b.type for b in final.content] == ["text"]  # no tool_use reaches the client
    first, again = [r.json() for r in second_mock.received if r.path.endswith("/messages")][-2:]
    assert [t["name"] for t in first["tools"]] == [TOOL]
    stubbed = json.dumps(first["messages"])
    assert "read_file a.cfg" in stubbed and f"is {SECRET}" not in stubbed
    assert again["messages"][-1]["content"][0]["type"] == "tool_result"
    assert f"is {SECRET}" in again["messages"][-1]["content"][0]["content"]
    assert final.usage.input_tokens == 20  # the recall round's usage is added
    assert final.usage.output_tokens == 10


# --- Responses ------------------------------------------------------------------------------


def _responses_model(request: Received) -> Reply:
    if not request.path.endswith("/responses"):
        return json_reply({"object": "list", "data": []})
    body = request.json()
    found = _found(request)
    handles = HANDLE.findall(request.body.decode())
    offered = any(t.get("name") == TOOL for t in body.get("tools") or [])
    if found is not None or not handles or not offered:
        item = responses_text_item(found or "I don't know.")
    else:
        item = responses_call_item(TOOL, {"id": handles[0]}, "call_r", "fc_1")
    if not body.get("stream"):
        return json_reply(response_body([item]))
    return sse_reply(responses_stream([item]))


@pytest.mark.parametrize("stream", [False, True])
def test_responses_recall_is_answered_with_a_function_call_output(mock, start_proxy, stream):
    mock.default = _responses_model
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, f"responses-{stream}")
    if stream:
        events = list(
            client.responses.create(
                model="gpt-4o", input=responses_history(BIG, "what is the port?"), stream=True
            )
        )
        final = next(e.response for e in events if e.type == "response.completed")
        assert final.usage.input_tokens == 20
        assert not any(
            e.type == "response.output_item.added" and e.item.type == "function_call"
            for e in events
        )
    else:
        final = client.responses.create(
            model="gpt-4o", input=responses_history(BIG, "what is the port?")
        )
        assert final.usage.input_tokens == 20
    assert final.output_text == f"found: the port is {SECRET}"
    first, again = [r.json() for r in mock.received if r.path.endswith("/responses")][-2:]
    assert [t["name"] for t in first["tools"]] == [TOOL]
    assert again["input"][-1]["type"] == "function_call_output"
    assert f"is {SECRET}" in again["input"][-1]["output"]
