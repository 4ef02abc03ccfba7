"""Faults a hostile tenant, model or provider causes, part of ``make test``: real
``compaction-proxy serve`` processes in front of the scripted mock providers, the official
clients, raw sockets where a client library would not send what is tested. docs/faults.md
("Tenant faults") lists the cases with their figures before and after.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.faults.replicas import Replica, proxy_config
from tests.support.anthropic_provider import AnthropicProvider
from tests.support.mock_upstream import (
    MockUpstream,
    Received,
    Reply,
    completion,
    json_reply,
    sse_reply,
)
from tests.support.native_provider import NativeProvider
from tests.support.provider import Provider
from tests.support.recall_model import TOOL, chat_call, chat_tool_stream
from tests.support.recall_provider import CLEARING, RecallProvider, cleared_history, recall_results
from tests.support.sdk_clients import closed_after_test

Start = Callable[[str], Replica]
HANDLE = re.compile(r"recall id (r[a-z2-7]{10})")
NATIVE = {"strategy": "native", "trigger": {"input_tokens": 60, "context_fraction": 0}}
TOOLS = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]


def _anthropic(replica: Replica, key: str) -> anthropic.Anthropic:
    return closed_after_test(
        anthropic.Anthropic(
            base_url=replica.url,
            api_key=key,
            max_retries=0,
            timeout=30,
            default_headers={"X-Conversation-Id": key},
        )
    )


def _openai(replica: Replica, conversation: str) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(
            base_url=f"{replica.url}/v1",
            api_key="sk-fault-tenant",
            max_retries=0,
            timeout=30,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def _history(rounds: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "read the sources"}]
    for n in range(rounds):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "line\n" * 60}
        history += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return history


def test_one_tenants_own_bad_native_fields_leave_native_on_for_the_others(
    mock: MockUpstream, second_mock: MockUpstream, start_serve: Start
) -> None:
    Provider(mock)  # the summarizer
    AnthropicProvider(second_mock)
    native = NativeProvider(second_mock)
    replica = start_serve(
        proxy_config(
            provider=mock.url,
            store_url="memory://",
            policies={"default": NATIVE},
            upstream={"anthropic_base_url": second_mock.url},
        )
    )
    careless = _anthropic(replica, "sk-ant-careless")
    faults = [
        {"extra_headers": {"anthropic-beta": "no-such-beta-2099"}},
        {"extra_body": {"context_management": {"edits": [{"type": "no_such_edit"}]}}},
    ]
    for fault in faults:
        with pytest.raises(anthropic.BadRequestError):
            careless.messages.create(
                model="claude-mock-1", max_tokens=50, tools=TOOLS, messages=_history(2), **fault
            )
    # A tenant on an old API version: the provider refuses the proxy's fields for it alone.
    stale = _anthropic(replica, "sk-ant-stale").with_options(
        default_headers={"anthropic-version": "2023-01-01"}
    )
    stale.messages.create(model="claude-mock-1", max_tokens=50, tools=TOOLS, messages=_history(2))
    careful = _anthropic(replica, "sk-ant-careful")
    strategies = []
    for _ in range(3):
        raw = careful.messages.with_raw_response.create(
            model="claude-mock-1", max_tokens=50, tools=TOOLS, messages=_history(2)
        )
        strategies.append(raw.headers["x-compaction-strategy"])
    sent = [r.json() for r in second_mock.received if r.path == "/v1/messages"][-3:]
    print(f"\nanother tenant's 3 requests after those: strategies {strategies}")
    assert strategies == ["native"] * 3
    assert all("context_management" in body for body in sent)
    assert native.refused == 1  # the stale tenant's, whose request was answered without


def _recall_replica(mock: MockUpstream, start_serve: Start, name: str) -> tuple[Any, list, str]:
    """A proxy stubbing old tool results, one recall round; a client, its history, a handle."""
    RecallProvider(mock)
    replica = start_serve(
        proxy_config(
            provider=mock.url,
            store_url="memory://",
            policies={"default": CLEARING},
            recall={"max_rounds": 1},
        )
    )
    client = _openai(replica, name)
    long_file = "\nthe id is SECRET-3131\n" + "a long line of the file being read\n" * 1000
    history = cleared_history(client, long_file)
    handle = HANDLE.findall(json.dumps(mock.chat_requests()[-1].json()))[0]
    return client, [*history, {"role": "user", "content": "what is the id?"}], handle


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_provider_ignoring_tool_choice_none_never_shows_the_client_a_recall_call(
    mock: MockUpstream, start_serve: Start, stream: bool
) -> None:
    client, history, handle = _recall_replica(mock, start_serve, f"stubborn-{stream}")

    def stubborn(request: Received) -> Reply:  # calls recall whatever tool_choice says
        body = request.json()
        said = "Giving up. " if body.get("tool_choice") == "none" else ""
        calls = [chat_call(TOOL, {"id": handle}, len(said))]
        if body.get("stream"):
            return sse_reply(chat_tool_stream(calls, preamble=said))
        return json_reply(completion(said, tool_calls=calls))

    mock.push(stubborn, stubborn)
    if stream:
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        calls = [p for c in chunks if c.choices for p in c.choices[0].delta.tool_calls or ()]
    else:
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        calls = list(reply.choices[0].message.tool_calls or ())
    print(f"\nrecall calls the client received (stream={stream}): {len(calls)}")
    assert calls == []


def test_hundreds_of_recall_calls_in_one_answer_make_a_bounded_re_ask(
    mock: MockUpstream, start_serve: Start
) -> None:
    client, history, handle = _recall_replica(mock, start_serve, "many-recalls")
    calls = [chat_call(TOOL, {"id": handle}, n) for n in range(300)]
    mock.push(json_reply(completion("", tool_calls=calls)), json_reply(completion("done")))
    reply = client.chat.completions.create(model="gpt-4o", messages=history)
    again = mock.chat_requests()[-1]
    print(f"\nthe re-ask after 300 recall calls: {len(again.body):,} bytes")
    assert reply.choices[0].message.content == "done"
    assert len(recall_results(again.json())) == 300
    assert len(again.body) < 256 * 1024


def test_a_control_character_in_a_header_is_a_json_400(
    mock: MockUpstream, start_serve: Start
) -> None:
    Provider(mock)
    replica = start_serve(proxy_config(provider=mock.url, store_url="memory://"))
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"x-conversation-id: c1\r\nx-compaction-focus: the \x01 tests\r\n"
    )
    with socket.create_connection(("127.0.0.1", replica.port), timeout=10) as sock:
        sock.sendall(head + b"content-length: %d\r\n\r\n%s" % (len(body), body))
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    status, _, rest = response.partition(b"\r\n")
    print(f"\nanswer to a control character in X-Compaction-Focus: {status.decode()}")
    assert status == b"HTTP/1.1 400 Bad Request"
    payload = rest.partition(b"\r\n\r\n")[2]
    assert json.loads(payload)["error"]["code"] == "malformed_request"
    assert [r for r in mock.received if r.path.endswith("/chat/completions")] == []
