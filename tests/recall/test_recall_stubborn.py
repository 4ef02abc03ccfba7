"""A provider that ignores ``tool_choice: none`` on the re-ask that ends the recall rounds (some
compatible servers do): its last answer calls the recall tool again. The client never declared
that tool, so no recall call may reach it, on any route, plain or streamed, whether the last
answer is the call alone or text followed by the call (docs/recall.md)."""

from __future__ import annotations

import json
import re
from typing import Any

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
from tests.support.mock_upstream import (
    MockUpstream,
    Received,
    Reply,
    completion,
    json_reply,
    sse_reply,
)
from tests.support.recall_histories import anthropic_history, responses_history
from tests.support.recall_model import TOOL, chat_call, chat_tool_stream
from tests.support.recall_provider import CLEARING, RecallProvider, cleared_history
from tests.support.sdk_clients import closed_after_test

BIG = "\nthe id is SECRET-7070\n" + "filler line of a file\n" * 60
HANDLE = re.compile(r"recall id (r[a-z2-7]{10})")
GIVING_UP = "Giving up. "
LAST = ["call-alone", "text-then-call"]
ONE_ROUND = {"recall": {"max_rounds": 1}}


def _stubborn(request: Received) -> tuple[dict[str, Any], str, bool]:
    """(the body, the handle to recall, whether to write text first): it calls recall whenever
    the tool is declared, ``tool_choice`` or not; text first only on the last re-ask."""
    body = request.json()
    handle = HANDLE.findall(request.body.decode())[0]
    last = body.get("tool_choice") in ("none", {"type": "none"})
    return body, handle, last


def _asked(mock: MockUpstream, path: str) -> list[dict[str, Any]]:
    return [r.json() for r in mock.received if r.path.endswith(path)]


# --- chat completions -----------------------------------------------------------------------


@pytest.mark.parametrize("last_reply", LAST)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_never_relays_a_recall_call(mock, start_proxy, stream, last_reply) -> None:
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING, **ONE_ROUND))
    client = openai_client(server, f"stubborn-chat-{stream}-{last_reply}")
    history = [*cleared_history(client, BIG), {"role": "user", "content": "what is the id?"}]
    texts = last_reply == "text-then-call"

    def stubborn(request: Received) -> Reply:
        body, handle, last = _stubborn(request)
        calls = [chat_call(TOOL, {"id": handle}, 1 if last else 0)]
        said = GIVING_UP if last and texts else ""
        if body.get("stream"):
            return sse_reply(chat_tool_stream(calls, preamble=said))
        return json_reply(completion(said, tool_calls=calls))

    mock.push(stubborn, stubborn)
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [
            part.function.name
            for c in chunks
            if c.choices
            for part in c.choices[0].delta.tool_calls or ()
            if part.function and part.function.name
        ]
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert "tool_calls" not in finishes
    else:
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        said = reply.choices[0].message.content or ""
        calls = [c.function.name for c in reply.choices[0].message.tool_calls or ()]
        assert reply.choices[0].finish_reason == "stop"
    assert calls == []
    assert said == (GIVING_UP if texts else "")
    assert mock.chat_requests()[-1].json().get("tool_choice") == "none"


# --- Anthropic Messages ---------------------------------------------------------------------


@pytest.mark.parametrize("last_reply", LAST)
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_never_relays_a_recall_call(
    mock, second_mock, start_proxy, stream, last_reply
) -> None:
    texts = last_reply == "text-then-call"

    def stubborn(request: Received) -> Reply:
        body, handle, last = _stubborn(request)
        blocks: list[dict[str, Any]] = [
            {"type": "tool_use", "id": f"toolu_r{int(last)}", "name": TOOL, "input": {"id": handle}}
        ]
        if last and texts:
            blocks.insert(0, {"type": "text", "text": GIVING_UP})
        if body.get("stream"):
            return sse_reply(anthropic_stream(blocks))
        return json_reply(message(blocks, model=body["model"], stop="tool_use"))

    second_mock.default = stubborn
    sections = merged(ONE_ROUND, {"upstream": {"anthropic_base_url": second_mock.url}})
    server = start_proxy(summarizing(mock.url, policy=CLEARING, **sections))
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key="sk-ant-test",
            max_retries=0,
            default_headers={"X-Conversation-Id": f"stubborn-anthropic-{stream}-{last_reply}"},
        )
    )
    options = dict(model="claude-x", max_tokens=100, messages=anthropic_history(BIG, "the id?"))
    if stream:
        with client.messages.stream(**options) as events:
            final = events.get_final_message()
    else:
        final = client.messages.create(**options)
    assert [b.type for b in final.content] == (["text"] if texts else [])
    assert final.stop_reason == "end_turn"
    assert _asked(second_mock, "/messages")[-1]["tool_choice"] == {"type": "none"}


# --- Responses ------------------------------------------------------------------------------


@pytest.mark.parametrize("last_reply", LAST)
@pytest.mark.parametrize("stream", [False, True])
def test_responses_never_relays_a_recall_call(mock, start_proxy, stream, last_reply) -> None:
    texts = last_reply == "text-then-call"

    def stubborn(request: Received) -> Reply:
        if not request.path.endswith("/responses"):
            return json_reply({"object": "list", "data": []})
        body, handle, last = _stubborn(request)
        output = [responses_call_item(TOOL, {"id": handle}, f"call_r{int(last)}", "fc_r")]
        if last and texts:
            output.insert(0, responses_text_item(GIVING_UP))
        if body.get("stream"):
            return sse_reply(responses_stream(output))
        return json_reply(response_body(output))

    mock.default = stubborn
    server = start_proxy(summarizing(mock.url, policy=CLEARING, **ONE_ROUND))
    client = openai_client(server, f"stubborn-responses-{stream}-{last_reply}")
    history = responses_history(BIG, "what is the id?")
    if stream:
        events = list(client.responses.create(model="gpt-4o", input=history, stream=True))
        added = [e.item.type for e in events if e.type == "response.output_item.added"]
        assert "function_call" not in added
        indices = [e.output_index for e in events if hasattr(e, "output_index")]
        assert all(i == 0 for i in indices)
        final = next(e.response for e in events if e.type == "response.completed")
    else:
        final = client.responses.create(model="gpt-4o", input=history)
    assert [item.type for item in final.output] == (["message"] if texts else [])
    assert final.output_text == (GIVING_UP if texts else "")
    assert json.dumps(_asked(mock, "/responses")[-1]["tool_choice"]) == '"none"'
