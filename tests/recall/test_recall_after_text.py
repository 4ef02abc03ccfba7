"""A streamed reply that starts with text and then calls the recall tool: models often
write a sentence before a tool call. The text reaches the client at once; the recall call never
does. The proxy answers it, asks again, and the client's stream goes on with the new answer, in
each dialect's own terms (chat chunks, Anthropic content blocks, Responses output items), through
the official clients."""

from __future__ import annotations

import itertools
import re
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.clients import ledger_after, openai_client
from tests.support.config import merged, summarizing
from tests.support.dialect_streams import (
    anthropic_stream,
    responses_call_item,
    responses_stream,
    responses_text_item,
)
from tests.support.mock_upstream import (
    MockUpstream,
    Received,
    Reply,
    json_reply,
    sse_chunks,
    sse_reply,
)
from tests.support.recall_histories import anthropic_history, responses_history
from tests.support.recall_model import TOOL, chat_call, chat_tool_stream
from tests.support.recall_provider import (
    CLEARING,
    RecallProvider,
    cleared_history,
    with_usage_chunk,
)
from tests.support.sdk_clients import closed_after_test

SECRET = "SECRET-5150"
BIG = f"\nthe id is {SECRET}\n" + "filler line of a file\n" * 60
HANDLE = re.compile(r"recall id (r[a-z2-7]{10})")
PREAMBLE = "Let me look that up. "
ANSWER = f"found: the id is {SECRET}"
QUESTION = "what is the id?"


def _handle(request: Received) -> str:
    return HANDLE.findall(request.body.decode())[0]


def _recorded(asked: list[dict[str, Any]], reply: Any) -> Any:
    """A mock script that keeps the request's body, then answers ``reply(request)``."""

    def script(request: Received) -> Reply:
        asked.append(request.json())
        return reply(request)

    return script


# --- chat completions -----------------------------------------------------------------------


def _chat_setup(mock: MockUpstream, start_proxy, name: str, **config: Any):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING, **config))
    client = openai_client(server, name)
    history = [*cleared_history(client, BIG), {"role": "user", "content": QUESTION}]
    return server, client, history


def _text_then(*names: str, pause: float = 0.0):
    """A streamed chat reply: the preamble, then a call of each tool named (recall: its handle)."""

    def reply(request: Received) -> Reply:
        calls = [
            chat_call(n, {"id": _handle(request)} if n == TOOL else {"path": "a.py"}, i)
            for i, n in enumerate(names)
        ]
        stream = chat_tool_stream(calls, preamble=PREAMBLE, pause=pause)
        return sse_reply(with_usage_chunk(stream))

    return reply


def _chat_answer(request: Received) -> Reply:
    return sse_reply(with_usage_chunk(sse_chunks(["found: ", f"the id is {SECRET}"])))


def _streamed(client: openai.OpenAI, history: list[dict[str, Any]]):
    """The chunks the client got, and when (monotonic) its first text came."""
    chunks, first_text = [], None
    stream = client.chat.completions.create(
        model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
    )
    with stream:
        for chunk in stream:
            if first_text is None and chunk.choices and chunk.choices[0].delta.content:
                first_text = time.monotonic()
            chunks.append(chunk)
    return chunks, first_text


def _text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _finishes(chunks) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def resumed_after_pause(chunk_times: list[float]) -> float:
    """When the provider sent its first chunk after the 1.5 s pause that follows its preamble:
    text held back until the recall call ended would reach the client only after it (a fixed
    margin instead flakes on a busy machine, where the client may see the text late)."""
    return next(t for before, t in itertools.pairwise(chunk_times) if t - before > 1.0)


def test_chat_text_then_a_recall_streams_the_text_at_once_then_the_answer(mock, start_proxy):
    server, client, history = _chat_setup(mock, start_proxy, "after-text-chat")
    before = ledger_after(server, "after-text-chat", len(mock.chat_requests()))
    asked: list[dict[str, Any]] = []
    mock.push(_recorded(asked, _text_then(TOOL, pause=1.5)), _recorded(asked, _chat_answer))

    chunks, first_text = _streamed(client, history)

    assert _text(chunks) == PREAMBLE + ANSWER
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert _finishes(chunks) == ["stop"]  # the recall's "tool_calls" ending never came out
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.total_tokens) == (20, 30)  # both calls
    # The provider paused 1.5 s after its preamble: the client had the text before that.
    assert first_text is not None and first_text < resumed_after_pause(mock.chunk_times)
    # The re-ask carried what the model said and its recall call, then the original.
    said, result = asked[1]["messages"][-2:]
    assert said["content"] == PREAMBLE
    assert [c["function"]["name"] for c in said["tool_calls"]] == [TOOL]
    assert result["role"] == "tool" and SECRET in result["content"]
    metrics = httpx.get(f"{server.url}/metrics").text
    assert re.search(r"^proxy_recall_rounds_total 1\.0$", metrics, re.M), metrics
    # The ledger priced the answer once, with the round's tokens in it.
    after = ledger_after(server, "after-text-chat", before["requests"] + 1)
    assert after["requests"] == before["requests"] + 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == 20


def test_chat_a_round_before_the_text_and_one_after_it_are_both_counted(mock, start_proxy):
    """The headers count the round run before they went out; the usage counts both."""
    server, client, history = _chat_setup(mock, start_proxy, "after-text-both")

    def recall_only(request: Received) -> Reply:
        calls = [chat_call(TOOL, {"id": _handle(request), "query": "nothing"}, 0)]
        return sse_reply(with_usage_chunk(chat_tool_stream(calls)))

    mock.push(recall_only, _text_then(TOOL), _chat_answer)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(raw.parse())

    assert raw.headers["x-compaction-recalls"] == "1"
    assert _text(chunks) == PREAMBLE + ANSWER and _finishes(chunks) == ["stop"]
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.total_tokens) == (30, 45)  # three calls
    metrics = httpx.get(f"{server.url}/metrics").text
    assert re.search(r"^proxy_recall_rounds_total 2\.0$", metrics, re.M), metrics


def test_chat_a_client_that_leaves_during_the_re_ask_cancels_it(mock, start_proxy):
    """The client has the text and goes away while the provider works on the re-ask: the
    proxy's request for it is closed, and the proxy serves on."""
    server, client, history = _chat_setup(mock, start_proxy, "after-text-leaves")
    slow = sse_reply(with_usage_chunk(sse_chunks(["late"])))
    slow.delay = 2.0
    mock.push(_text_then(TOOL), slow)
    left, asked = len(mock.disconnects), len(mock.chat_requests())

    stream = client.chat.completions.create(model="gpt-4o", messages=history, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break  # the preamble came: leave
    deadline = time.monotonic() + 2.0
    while len(mock.chat_requests()) < asked + 2:  # the re-ask reached the provider
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stream.close()
    closed_at = time.monotonic()

    deadline = closed_at + 2.0
    while len(mock.disconnects) == left and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(mock.disconnects) > left, "the re-ask was left running"
    assert mock.disconnects[-1] - closed_at < 1.0
    assert httpx.get(f"{server.url}/v1/models").status_code == 200


def test_chat_a_gzip_stream_is_spliced_and_relayed_decoded(mock, start_proxy):
    """The provider compresses its streams: the proxy reads them to splice, so what it relays
    is decoded (no Content-Encoding), whatever the client accepted."""
    _, client, history = _chat_setup(mock, start_proxy, "after-text-gzip")
    mock.compression = "gzip"
    mock.push(_text_then(TOOL), _chat_answer)

    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(raw.parse())

    assert "content-encoding" not in raw.headers
    assert _text(chunks) == PREAMBLE + ANSWER and _finishes(chunks) == ["stop"]
    assert mock.chat_requests()[-1].headers["accept-encoding"] == "gzip, deflate"


def test_chat_text_then_a_client_tool_is_relayed_as_the_provider_sent_it(mock, start_proxy):
    _, client, history = _chat_setup(mock, start_proxy, "after-text-own")
    asked: list[dict[str, Any]] = []
    mock.push(_recorded(asked, _text_then("read_file")))

    chunks, _ = _streamed(client, history)

    assert _text(chunks) == PREAMBLE
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert {t.function.name for t in calls if t.function.name} == {"read_file"}
    assert _finishes(chunks) == ["tool_calls"]
    assert len(asked) == 1 and chunks[-1].usage.prompt_tokens == 10  # no round ran


def test_chat_text_then_a_recall_with_a_client_call_gives_the_client_its_call_alone(
    mock, start_proxy
):
    _, client, history = _chat_setup(mock, start_proxy, "after-text-mixed")
    asked: list[dict[str, Any]] = []

    def own(request: Received) -> Reply:
        return sse_reply(with_usage_chunk(chat_tool_stream([chat_call("read_file", {"p": 1}, 9)])))

    mock.push(_recorded(asked, _text_then(TOOL, "read_file")), _recorded(asked, own))

    chunks, _ = _streamed(client, history)

    assert _text(chunks) == PREAMBLE
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert [t.function.name for t in calls if t.function.name] == ["read_file"]
    assert {t.index for t in calls} == {0} and calls[0].id == "call_read_file_9"
    assert _finishes(chunks) == ["tool_calls"]
    said = asked[1]["messages"][-2]
    assert [c["function"]["name"] for c in said["tool_calls"]] == [TOOL]  # recall only


def test_chat_a_failed_re_ask_ends_the_stream_with_the_providers_error(mock, start_proxy):
    _, client, history = _chat_setup(mock, start_proxy, "after-text-error")
    busy = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate"}}
    mock.push(_text_then(TOOL), json_reply(busy, status=429))

    got: list[str] = []
    with pytest.raises(openai.APIError, match="Rate limit reached"):
        stream = client.chat.completions.create(model="gpt-4o", messages=history, stream=True)
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert "".join(got) == PREAMBLE


# --- Anthropic ------------------------------------------------------------------------------


def _anthropic_text_then_recall(text: str, pause: float = 0.0):
    def reply(request: Received) -> Reply:
        recall = {
            "type": "tool_use",
            "id": "toolu_r",
            "name": TOOL,
            "input": {"id": _handle(request)},
        }
        return sse_reply(anthropic_stream([{"type": "text", "text": text}, recall], pause=pause))

    return reply


def _anthropic_answer(request: Received) -> Reply:
    return sse_reply(anthropic_stream([{"type": "text", "text": ANSWER}]))


@pytest.fixture
def anthropic_client(mock: MockUpstream, second_mock: MockUpstream, start_proxy):
    sections = merged({"upstream": {"anthropic_base_url": second_mock.url}})
    server = start_proxy(summarizing(mock.url, policy=CLEARING, **sections))

    def make(name: str) -> anthropic.Anthropic:
        return closed_after_test(
            anthropic.Anthropic(
                base_url=server.url,
                api_key="sk-ant-test",
                max_retries=0,
                default_headers={"X-Conversation-Id": name},
            )
        )

    return make


def test_anthropic_text_then_recalls_go_on_as_more_text_blocks(anthropic_client, second_mock):
    """Two rounds after text: each answer's blocks follow those the client already has."""
    asked: list[dict[str, Any]] = []
    second_mock.push(
        _recorded(asked, _anthropic_text_then_recall(PREAMBLE, pause=1.5)),
        _recorded(asked, _anthropic_text_then_recall("One more look. ")),
        _recorded(asked, _anthropic_answer),
    )
    client = anthropic_client("after-text-anthropic")
    first_text = None
    options = dict(model="claude-x", max_tokens=100, messages=anthropic_history(BIG, QUESTION))
    with client.messages.stream(**options) as events:
        pieces = []
        for piece in events.text_stream:
            first_text = first_text or time.monotonic()
            pieces.append(piece)
        final = events.get_final_message()

    assert "".join(pieces) == PREAMBLE + "One more look. " + ANSWER
    assert [(b.type, b.text) for b in final.content] == [
        ("text", PREAMBLE),
        ("text", "One more look. "),
        ("text", ANSWER),
    ]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 15)  # three calls
    assert first_text is not None and first_text < resumed_after_pause(second_mock.chunk_times)
    said, results = asked[1]["messages"][-2:]
    assert [b["type"] for b in said["content"]] == ["text", "tool_use"]
    assert said["content"][0]["text"] == PREAMBLE
    assert results["content"][0]["type"] == "tool_result"
    assert SECRET in results["content"][0]["content"]
    assert len(asked) == 3


# --- Responses ------------------------------------------------------------------------------


def test_responses_text_then_a_recall_goes_on_as_a_second_message(mock, start_proxy):
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "after-text-responses")
    client.responses.create(
        model="gpt-4o", input=responses_history(BIG, QUESTION)[:-1]
    )  # stubs the output
    asked: list[dict[str, Any]] = []

    def text_then_recall(request: Received) -> Reply:
        call = responses_call_item(TOOL, {"id": _handle(request)}, "call_r", "fc_r")
        output = [responses_text_item(PREAMBLE, "msg_a"), call]
        return sse_reply(responses_stream(output, response_id="resp_first", pause=1.5))

    def answer(request: Received) -> Reply:
        output = [responses_text_item(ANSWER, "msg_b")]
        return sse_reply(responses_stream(output, response_id="resp_again"))

    mock.push(_recorded(asked, text_then_recall), _recorded(asked, answer))
    first_text = None
    seen = []
    with client.responses.stream(model="gpt-4o", input=responses_history(BIG, QUESTION)) as stream:
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta" and first_text is None:
                first_text = time.monotonic()
        final = stream.get_final_response()

    assert final.output_text == PREAMBLE + ANSWER
    assert [(i.type, i.id) for i in final.output] == [("message", "msg_a"), ("message", "msg_b")]
    assert final.id == "resp_first"  # the id the stream opened with
    assert final.usage.input_tokens == 20 and final.usage.output_tokens == 10
    assert not any(getattr(getattr(e, "item", None), "type", "") == "function_call" for e in seen)
    numbers = [e.sequence_number for e in seen if hasattr(e, "sequence_number")]
    assert numbers == sorted(set(numbers))
    assert first_text is not None and first_text < resumed_after_pause(mock.chunk_times)
    *_, said, call, result = asked[1]["input"]
    assert said == {"role": "assistant", "content": PREAMBLE}  # by its text, not its id
    assert call["type"] == "function_call" and call["name"] == TOOL
    assert result["type"] == "function_call_output" and SECRET in result["output"]
