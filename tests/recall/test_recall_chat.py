"""The recall tool through a real proxy with the official openai client: a cleared
tool result is fetched back by the model, the client never sees the tool, its calls or their
results, and the tool stays out when it must."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx

from tests.support.clients import admin_get, openai_client
from tests.support.config import summarizing
from tests.support.mock_upstream import Received, Reply, completion, json_reply
from tests.support.provider import SYSTEM, take_turn
from tests.support.recall_model import TOOL
from tests.support.recall_provider import CLEARING, RecallProvider, cleared_history, recall_results

SECRET = "SECRET-7731"
BIG_RESULT = f"\nline 1 of the file\nthe token is {SECRET} here\n" + "filler line of a file\n" * 60


def _tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def test_a_cleared_result_is_recalled_and_the_client_sees_only_the_answer(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-1")
    history = cleared_history(client, BIG_RESULT)
    before = len(provider.chat_requests())
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    reply = raw.parse()

    message = reply.choices[0].message
    assert message.content == f"found: the token is {SECRET} here"
    assert not message.tool_calls  # the recall call never reaches the client
    assert raw.headers["x-compaction-recalls"] == "1"
    assert int(raw.headers["x-compaction-recall-tokens"]) == 15  # the mock bills 10 + 5
    assert reply.usage.prompt_tokens == 20 and reply.usage.total_tokens == 30  # both calls
    asked, again = provider.chat_requests()[before:]
    # The first request carried the stub naming its handle, and the tool.
    stubs = [m["content"] for m in asked["messages"] if m["role"] == "tool"]
    assert any(
        re.search(r"read_file src/f\d+_a\.py, \d+ tokens; recall id r[a-z2-7]{10}\]", s)
        for s in stubs
    ), stubs
    assert _tool_names(asked) == [TOOL]  # the client sent no tools this time
    # The second carried the original, as the tool's result.
    assert any(SECRET in r for r in recall_results(again))
    assert f"is {SECRET}" not in json.dumps(asked["messages"])  # only in the recall's result


def test_a_streamed_recall_is_answered_and_only_the_final_text_streams(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-stream")
    history = cleared_history(client, BIG_RESULT)
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(raw.parse())
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.total_tokens) == (20, 30)  # the round's usage added
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == f"found: the token is {SECRET} here"
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert raw.headers["x-compaction-recalls"] == "1"
    assert len(provider.chat_requests()) >= 2


def test_a_client_tool_of_the_same_name_turns_recall_off(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-own-tool")
    history = cleared_history(client, BIG_RESULT)
    own = {"type": "function", "function": {"name": TOOL, "parameters": {"type": "object"}}}
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    before = len(provider.chat_requests())
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, tools=[own]
    )
    sent = provider.chat_requests()[before:]
    assert len(sent) == 1 and _tool_names(sent[0]) == [TOOL]  # the client's tool, alone
    # No stub names a handle the client's own tool would be called with.
    assert "recall id" not in json.dumps(sent[0]["messages"])
    assert raw.parse().choices[0].message.content == "I don't know."
    assert "x-compaction-recalls" not in raw.headers


def test_tool_choice_none_and_compaction_off_leave_the_tool_out(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-none")
    history = cleared_history(client, BIG_RESULT)
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    before = len(provider.chat_requests())
    none = client.chat.completions.create(model="gpt-4o", messages=history, tool_choice="none")
    off = client.chat.completions.create(
        model="gpt-4o", messages=history, extra_headers={"X-Compaction": "off"}
    )
    sent = provider.chat_requests()[before:]
    assert [TOOL in _tool_names(b) for b in sent] == [False, False]
    assert none.choices[0].message.content == "I don't know."  # no tool: the stub is all it has
    assert off.choices[0].message.content.startswith("found:")  # off: the full history went out


def test_a_handle_of_another_conversation_or_tenant_is_not_found(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    cleared_history(openai_client(server, "owner"), BIG_RESULT)
    owners = [json.dumps(b["messages"]) for b in provider.chat_requests()]
    handle = re.findall(r"recall id (r[a-z2-7]{10})", owners[-1])[0]
    provider.force_ids = (handle,)
    for conversation, key in (("other", "sk-test-key"), ("owner", "sk-other-tenant")):
        client = openai_client(server, conversation, key=key)
        history = cleared_history(client, BIG_RESULT)
        history.append({"role": "user", "content": "RECALL NOTHING-HERE"})
        before = len(provider.chat_requests())
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        assert not reply.choices[0].message.tool_calls
        again = provider.chat_requests()[before + 1]  # the re-ask after the forced call
        assert recall_results(again) == [
            f"Not found: no original with recall id {handle} in this conversation "
            "(unknown or expired)."
        ]


def test_a_streamed_text_reply_is_relayed_before_the_provider_finishes(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-text")
    history = cleared_history(client, BIG_RESULT)
    history.append({"role": "user", "content": "Question 9: and then?"})
    from tests.support.mock_upstream import sse_chunks, sse_reply

    gate = threading.Event()
    mock.push(sse_reply([*sse_chunks(["first", "second"])[:2], 2.0, *sse_chunks(["x"])[2:]]))
    with client.chat.completions.create(model="gpt-4o", messages=history, stream=True) as stream:
        first = next(iter(stream))
        got_first = time.monotonic()
        gate.set()
        rest = list(stream)
    sent = provider.chat_requests()[-1]
    assert TOOL in _tool_names(sent)  # the request had handles: the tool was offered
    assert first.choices[0].delta.content in ("", "first")
    # The provider paused 2 s after its first text: the client had it before the pause ended.
    assert mock.chunk_times[-1] - got_first > 1.0
    assert rest


def test_recall_is_counted_on_metrics_and_the_originals_are_in_the_store(mock, start_proxy):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-metrics")
    history = cleared_history(client, BIG_RESULT)
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    client.chat.completions.create(model="gpt-4o", messages=history)
    metrics = httpx.get(f"{server.url}/metrics").text
    assert re.search(r'^proxy_recall_calls_total\{outcome="found"\} 2\.0$', metrics, re.M), metrics
    assert re.search(r"^proxy_recall_rounds_total 1\.0$", metrics, re.M)
    assert re.search(r"^proxy_recall_tokens_total 15\.0$", metrics, re.M)
    assert re.search(r"^proxy_recall_originals_kept_total [1-9]", metrics, re.M)


SUMMARIZING = {
    "strategy": "summarize",
    "trigger": {"context_fraction": 0, "interactions": 4},
    "keep": {"interactions": 1},
}


def test_a_summarized_turn_is_listed_in_the_summary_index_and_recalled(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=SUMMARIZING))
    client = openai_client(server, "recall-summary")
    history = [SYSTEM]
    take_turn(client, history, "Remember: the deploy word is periwinkle, keep it.")
    for turn in range(1, 6):  # long enough that the summary and its index save tokens
        take_turn(client, history, f"Question {turn}: and then? " + "Some detail. " * 60)
    history.append({"role": "user", "content": "RECALL periwinkle"})
    before = len(provider.chat_requests())
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)

    assert (
        raw.parse().choices[0].message.content
        == "found: user: Remember: the deploy word is periwinkle, keep it."
    )
    assert raw.headers["x-compaction"] == "applied" and raw.headers["x-compaction-recalls"] == "1"
    asked = provider.chat_requests()[before]
    summary = asked["messages"][1]["content"]
    assert summary.startswith("<agent_summary>") and summary.endswith("</agent_summary>")
    assert "word is periwinkle" not in json.dumps(asked["messages"])  # summarized away ...
    index = re.findall(r"^- (r[a-z2-7]{10}): messages 1-\d+, [\d,]+ chars$", summary, re.M)
    assert index, summary  # ... and listed in the summary's recall index


def test_the_admin_api_shows_what_is_kept_to_its_own_tenant_only(mock, start_proxy):
    """``GET /admin/conversations/{id}/originals`` (the console's "what it replaced"): the kept
    originals by handle, to the conversation's own tenant; another caller's key sees a 404."""
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-admin")
    cleared_history(client, BIG_RESULT)

    deadline = time.monotonic() + 5
    while (shown := admin_get(server, "/conversations/recall-admin/originals")).status_code != 200:
        assert time.monotonic() < deadline, shown.text  # the originals are written after answers
        time.sleep(0.02)
    data = shown.json()["data"]
    assert any(SECRET in item["content"] for item in data)
    assert all(re.fullmatch(r"r[a-z2-7]{10}", item["handle"]) for item in data)
    other = admin_get(server, "/conversations/recall-admin/originals", key="sk-someone-else")
    assert other.status_code == 404
    # What the admin API answers holds a tenant's conversations: never cached, never sniffed.
    for answer in (shown, other, admin_get(server, "/conversations/recall-admin")):
        assert answer.headers["cache-control"] == "no-store", answer.url
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url
    refused = httpx.get(f"{server.url}/admin/conversations/recall-admin/originals")
    assert refused.status_code == 401
    assert refused.headers["cache-control"] == "no-store"


def test_tools_that_are_not_a_list_go_out_as_they_came(mock, start_proxy):
    """An invalid ``tools`` is the provider's to refuse: the proxy adds nothing to it."""
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-odd-tools")
    history = cleared_history(client, BIG_RESULT)
    history.append({"role": "user", "content": "and now?"})
    client.chat.completions.create(
        model="gpt-4o", messages=history, extra_body={"tools": {"not": "a list"}}
    )
    sent = mock.chat_requests()[-1].json()
    stubbed = json.dumps(sent["messages"])
    assert "tool result cleared" in stubbed  # compacted ...
    assert sent["tools"] == {"not": "a list"}  # ... its tools as they came ...
    assert "recall id" not in stubbed  # ... and no handle for a tool it was not offered


def test_a_recall_call_whose_name_is_escaped_is_still_answered(mock, start_proxy):
    """JSON may spell the tool's name with ``\\u`` escapes: the call is a recall all the same,
    answered, and never reaches the client."""
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "recall-escaped")
    history = [*cleared_history(client, BIG_RESULT), {"role": "user", "content": "the token?"}]
    escaped = f"\\u{ord(TOOL[0]):04x}{TOOL[1:]}"

    def escaped_call(request: Received) -> Reply:
        handle = re.findall(r"recall id (r[a-z2-7]{10})", request.body.decode())[0]
        call = {"id": "call_1", "type": "function", "function": {"name": "NAME"}}
        call["function"]["arguments"] = json.dumps({"id": handle})
        reply = json_reply(completion("", tool_calls=[call]))
        body = reply.chunks[0]
        assert isinstance(body, bytes) and TOOL.encode() not in body.replace(b"NAME", b"")
        reply.chunks = [body.replace(b'"NAME"', f'"{escaped}"'.encode())]
        return reply

    mock.push(escaped_call, json_reply(completion("found it")))
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    message = raw.parse().choices[0].message
    assert message.content == "found it" and not message.tool_calls
    assert raw.headers["x-compaction-recalls"] == "1"
