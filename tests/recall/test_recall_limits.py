"""The recall loop's bounds and its company, through a real proxy with the openai
client: rounds end with a re-ask that forbids tools, a recall made with a client tool call comes
back as the client's call alone, originals outlive a history the client trimmed (the store), and
a store that is down leaves the request served."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

from tests.support.clients import ledger_after, openai_client
from tests.support.config import summarizing
from tests.support.mock_upstream import Received, Reply, completion, json_reply
from tests.support.provider import SYSTEM, take_turn
from tests.support.recall_model import TOOL, chat_call
from tests.support.recall_provider import CLEARING, RecallProvider, cleared_history, recall_results

SECRET = "SECRET-9090"
BIG = f"\nthe id is {SECRET}\n" + "filler line of a file\n" * 60
HANDLE = re.compile(r"recall id (r[a-z2-7]{10})")


def test_rounds_end_with_a_re_ask_that_forbids_tools(mock, start_proxy):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING, recall={"max_rounds": 2}))
    client = openai_client(server, "limits-rounds")
    history = cleared_history(client, BIG)
    handle = HANDLE.findall(json.dumps(mock.chat_requests()[-1].json()))[0]
    asked: list[dict[str, Any]] = []

    def stubborn(request: Received) -> Reply:  # calls recall as long as it may
        body = request.json()
        asked.append(body)
        if body.get("tool_choice") == "none":
            return json_reply(completion("giving up"))
        return json_reply(completion("", tool_calls=[chat_call(TOOL, {"id": handle}, len(asked))]))

    mock.push(stubborn, stubborn, stubborn)
    history.append({"role": "user", "content": "go"})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)

    assert raw.parse().choices[0].message.content == "giving up"
    assert raw.headers["x-compaction-recalls"] == "2"
    assert [b.get("tool_choice") for b in asked] == [None, None, "none"]
    assert all(SECRET in r for r in recall_results(asked[-1]))


def test_a_recall_with_a_client_call_is_answered_first_and_the_client_gets_its_ownchat_call(
    mock, start_proxy
):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "limits-mixed")
    history = cleared_history(client, BIG)
    handle = HANDLE.findall(json.dumps(mock.chat_requests()[-1].json()))[0]
    asked: list[dict[str, Any]] = []

    def both(request: Received) -> Reply:
        asked.append(request.json())
        calls = [chat_call(TOOL, {"id": handle}, 1), chat_call("read_file", {"path": "a.py"}, 1)]
        return json_reply(completion("", tool_calls=calls))

    def own(request: Received) -> Reply:
        asked.append(request.json())
        return json_reply(completion("", tool_calls=[chat_call("read_file", {"path": "a.py"}, 2)]))

    mock.push(both, own)
    history.append({"role": "user", "content": "go"})
    reply = client.chat.completions.create(model="gpt-4o", messages=history)

    calls = reply.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["read_file"]  # the client's own, alone
    again = asked[1]["messages"]
    assert [c["function"]["name"] for c in again[-2]["tool_calls"]] == [TOOL]  # recall only
    assert again[-1]["role"] == "tool" and SECRET in again[-1]["content"]


def test_an_original_outlives_a_history_the_client_trimmed(mock, start_proxy):
    provider = RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "limits-trimmed")
    history = cleared_history(client, BIG)
    handle = HANDLE.findall(json.dumps(provider.chat_requests()[-1]))[0]
    start = len(history)
    take_turn(client, history, "Step 4 TOOL", tool_output="\nother output\n" + "more\n" * 80)
    for turn in range(5, 8):
        take_turn(client, history, f"Question {turn}: and then?")
    # The client keeps only its newest turns now: the first stub and its original are gone from
    # it; Step 4's results are old enough to be stubbed, so the request still gets the tool.
    trimmed = [SYSTEM, *history[start:], {"role": "user", "content": "RECALL NOTHING"}]
    assert SECRET not in json.dumps(trimmed)
    provider.force_ids = (handle,)
    before = len(provider.chat_requests())
    client.chat.completions.create(model="gpt-4o", messages=trimmed)
    again = provider.chat_requests()[before + 1]
    assert any(SECRET in r for r in recall_results(again))  # from the store


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_store_that_is_down_leaves_recall_working_from_the_request(mock, start_proxy):
    RecallProvider(mock)
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    server = start_proxy(summarizing(mock.url, url, policy=CLEARING))
    client = openai_client(server, "limits-down")
    history = cleared_history(client, BIG)
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    assert raw.parse().choices[0].message.content == f"found: the id is {SECRET}"
    assert raw.headers["x-compaction-recalls"] == "1"


def test_the_ledger_prices_each_call_once(mock, start_proxy):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    client = openai_client(server, "limits-ledger")
    history = cleared_history(client, BIG)
    calls = len(mock.chat_requests())
    before = ledger_after(server, "limits-ledger", calls)
    history.append({"role": "user", "content": f"RECALL {SECRET}"})
    client.chat.completions.create(model="gpt-4o", messages=history)  # one round, then final
    # The final answer's usage holds the round's: one request priced, both calls' tokens.
    after = ledger_after(server, "limits-ledger", before["requests"] + 1)
    assert after["requests"] == before["requests"] + 1
    assert after["prompt_tokens"] - before["prompt_tokens"] == 20
    assert after["output_tokens"] - before["output_tokens"] == 10


def test_one_round_of_many_recall_calls_is_capped_in_all(mock, start_proxy):
    RecallProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING, recall={"max_rounds": 1}))
    client = openai_client(server, "limits-many")
    long_file = f"\nthe id is {SECRET}\n" + "a long line of the file being read\n" * 1000
    history = cleared_history(client, long_file)
    handle = HANDLE.findall(json.dumps(mock.chat_requests()[-1].json()))[0]
    # A model that asks for the same 35 kB original 300 times in one answer.
    calls = [chat_call(TOOL, {"id": handle}, n) for n in range(300)]
    mock.push(json_reply(completion("", tool_calls=calls)), json_reply(completion("done")))
    history.append({"role": "user", "content": "go"})
    reply = client.chat.completions.create(model="gpt-4o", messages=history)

    assert reply.choices[0].message.content == "done"
    again = mock.chat_requests()[-1]
    results = recall_results(again.json())
    assert len(results) == 300  # every call has its result, as the providers require
    assert SECRET in results[0]
    # Each result is capped (recall.max_result_bytes), and so is the round's total.
    assert len(again.body) < 256 * 1024, len(again.body)
