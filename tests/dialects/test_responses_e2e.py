"""The Responses API compacted end to end: the official openai client's ``responses.create``, a
real proxy, and a mock provider that plays a reasoning model and refuses what the real API
refuses (a tool output without its call, a call without its reasoning item).

What a user notices: the agent's input stops growing, one summary item follows the preamble,
reasoning items travel with their calls, the task and the newest round go out verbatim,
``instructions`` is untouched, and whatever the proxy does not compact goes out byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.cache_key import without_key
from tests.support.clients import KEY, admin_get, openai_client
from tests.support.config import AGENT_RUN, EVERY_FOUR_INTERACTIONS, FROZEN, summarizing
from tests.support.provider import tool_output
from tests.support.responses_provider import (
    DEVELOPER,
    INSTRUCTIONS,
    TASK,
    TOOLS,
    ResponsesProvider,
    long_input,
)
from tests.support.settle import settle


def client(server: Any, key: str = KEY) -> openai.OpenAI:
    return openai_client(server, None, key=key)


class Agent:
    """A stateless Responses agent loop, as the Agents SDK runs it with ``store=False``."""

    def __init__(self, api: openai.OpenAI, conversation: str, history: list | None = None) -> None:
        self.api = api
        self.conversation = conversation
        self.history: list[dict[str, Any]] = history if history is not None else [DEVELOPER, TASK]
        self.lengths: list[int] = []  # len(history) at each request
        self.headers: list[dict[str, str]] = []

    def send(self, **extra: Any) -> Any:
        """One request with the history as it stands (a raw response)."""
        self.lengths.append(len(self.history))
        return self.api.responses.with_raw_response.create(
            model="gpt-4o",
            instructions=INSTRUCTIONS,
            input=self.history,
            tools=TOOLS,
            store=False,
            extra_headers={"X-Conversation-Id": self.conversation},
            **extra,
        )

    def run(self, rounds: int) -> Agent:
        for _ in range(rounds):
            raw = self.send()
            self.headers.append(dict(raw.headers))
            calls = []
            for item in raw.parse().output:
                self.history.append(item.model_dump(exclude_none=True))
                if item.type == "function_call":
                    calls.append(item.call_id)
            assert calls, "the mock plays an agent that keeps calling tools"
            for call_id in calls:
                self.history.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": tool_output(len(self.history)),
                    }
                )
        return self


def summary_items(items: list[dict[str, Any]]) -> list[int]:
    return [i for i, item in enumerate(items) if "<agent_summary>" in json.dumps(item)]


def check_sent(body: dict[str, Any], history: list[dict[str, Any]], length: int) -> None:
    """The preamble, at most one summary item right after it, the task verbatim, then the
    client's items verbatim up to what was its newest, starting at a round boundary; every
    output after its call, every reasoning item right before the call it came with."""
    assert body["instructions"] == INSTRUCTIONS
    items = body["input"]
    assert items[0] == DEVELOPER
    summaries = summary_items(items)
    assert summaries in ([], [1]), summaries
    if summaries:
        summary = items[1]
        assert summary.keys() == {"type", "role", "content"}
        assert (summary["type"], summary["role"]) == ("message", "system")
        assert summary["content"].startswith("<agent_summary>")
        assert summary["content"].count("agent_summary>") == 2
    rest = items[2:] if summaries else items[1:]
    assert rest[0] == TASK, "the task is never summarized away"
    rest = rest[1:]
    assert rest == history[length - len(rest) : length], "not the newest items verbatim"
    if summaries and rest:
        assert history[length - len(rest) - 1]["type"] == "function_call_output"
    calls: set[str] = set()
    for i, item in enumerate(rest):
        if item["type"] == "function_call":
            calls.add(item["call_id"])
        if item["type"] == "function_call_output":
            assert item["call_id"] in calls, "an output without its call"
        if item["type"] == "reasoning":
            assert rest[i + 1]["type"] == "function_call"


@pytest.mark.parametrize("mode", ["inline", "ahead"])
def test_an_agent_run_is_compacted(mock, start_proxy, store_url: str, mode: str) -> None:
    provider = ResponsesProvider(mock)
    server = start_proxy(
        summarizing(mock.url, store_url, mode=mode, policy=AGENT_RUN, policies=FROZEN)
    )
    agent = Agent(client(server), "agent-1").run(30)
    settle(server.url, route="responses", answered=30)  # the last ahead summary may be running

    assert provider.refusals == []
    outcomes = [h["x-compaction"] for h in agent.headers]
    assert "applied" in outcomes and "failed" not in outcomes and "blocked" not in outcomes
    sent = provider.responses_requests()
    assert len(sent) == 30
    for body, length in zip(sent, agent.lengths, strict=True):
        check_sent(body, agent.history, length)
    assert summary_items(sent[-1]["input"]) == [1]
    assert len(sent[-1]["input"]) < len(agent.history) / 3
    assert int(agent.headers[-1]["x-compaction-tokens-before"]) > 12_000
    # The summarizer read the run as a transcript: the task, the reasoning summaries marked as
    # such, the calls; never the encrypted reasoning.
    transcript = json.dumps(provider.chat.summary_requests()[0]["messages"])
    assert "fix the failing tests" in transcript
    assert "[reasoning] attempt 1: run the tests" in transcript
    assert 'run_tests({\\"attempt\\": 1})' in transcript
    assert "gAAAA" not in transcript
    record = admin_get(server, "/conversations/agent-1").json()
    assert record["checkpoints"]


@pytest.mark.parametrize("in_stream", [False, True])
def test_a_streamed_overflow_is_rescued_once(mock, start_proxy, in_stream: bool) -> None:
    """A streamed request refused with a 400 context_length_exceeded, or with a 200 whose events
    end in response.failed with that code: the client sees only the compacted retry's events.
    (A plain request's rescue: tests/dialects/test_behaviour.py.)"""
    provider = ResponsesProvider(mock)
    provider.overflow_in_stream = in_stream
    never = {**AGENT_RUN, "trigger": {"interactions": 100, "context_fraction": 0}}
    server = start_proxy(summarizing(mock.url, policy=never, policies=FROZEN))
    agent = Agent(client(server), "overflow").run(8)
    provider.max_items = 14
    raw = agent.send(stream=True)
    events = [event.type for event in raw.parse()]
    assert events[-1] == "response.completed"
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"
    first, second = provider.responses_requests()[-2:]
    assert first["input"] == agent.history
    assert len(second["input"]) <= 14
    check_sent(second, agent.history, agent.lengths[-1])
    assert provider.chat.summaries == 1


@pytest.mark.parametrize(
    ("headers", "extra"),
    [
        ({"x-compaction": "off"}, {}),
        ({"x-compaction-policy": "frozen"}, {}),
        ({}, {"previous_response_id": "resp_earlier"}),
        ({}, {"conversation": "conv_abc"}),
        ({}, {"input": "a plain string input"}),
    ],
)
def test_what_is_not_compacted_goes_out_byte_identical(mock, start_proxy, headers, extra) -> None:
    provider = ResponsesProvider(mock)
    trigger, keep = {"interactions": 2, "context_fraction": 0}, {"interactions": 1}
    interactions = {**AGENT_RUN, "trigger": trigger, "keep": keep}
    server = start_proxy(summarizing(mock.url, policy=interactions, policies=FROZEN))
    fields = {"model": "gpt-4o", "instructions": INSTRUCTIONS, "input": long_input(), **extra}
    body = json.dumps(fields, indent=1).encode()
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=body,
        headers={"authorization": f"Bearer {KEY}", "x-conversation-id": "c-off", **headers},
    )
    assert response.status_code == 200
    assert response.headers["x-compaction"] == "off"
    assert mock.received[-1].body == body
    assert provider.chat.summaries == 0


def test_previous_response_id_with_the_official_client_is_off(mock, start_proxy) -> None:
    ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=AGENT_RUN, policies=FROZEN))
    raw = client(server).responses.with_raw_response.create(
        model="gpt-4o",
        previous_response_id="resp_earlier",
        input=[{"type": "function_call_output", "call_id": "call_x", "output": "ok"}],
        extra_headers={"X-Conversation-Id": "chained"},
    )
    assert raw.headers["x-compaction"] == "off"


def test_a_request_below_the_trigger_goes_out_byte_identical(mock, start_proxy) -> None:
    ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=AGENT_RUN, policies=FROZEN))
    body = json.dumps({"model": "gpt-4o", "input": long_input()}, indent=2).encode()
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=body,
        headers={"authorization": f"Bearer {KEY}", "x-conversation-id": "small"},
    )
    assert response.headers["x-compaction"] == "skipped"
    # The client's bytes, with the conversation's cache key first (on every request of it).
    assert without_key(mock.received[-1].body) == body


@pytest.mark.parametrize(
    ("input_", "param"),
    [
        (5, "input"),
        ([{"type": "message", "role": "robot", "content": "hi"}], "input[0].role"),
        ([{"type": "message", "role": "user", "content": 5}], "input[0].content"),
        ([{"role": "user", "content": "x"}, {"type": "function_call", "name": "f"}], "input[1]."),
        ([{"type": "function_call_output", "call_id": "c", "output": 5}], "input[0].output"),
        ([{"type": "custom_tool_call_output", "output": "ok"}], "input[0].call_id"),
        (["just a string item"], "input[0]"),
    ],
)
def test_bad_input_is_a_400_in_openai_shape_and_stores_nothing(
    mock, start_proxy, input_: Any, param: str
) -> None:
    ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=AGENT_RUN, policies=FROZEN))
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).responses.create(
            model="gpt-4o", input=input_, extra_headers={"X-Conversation-Id": "bad"}
        )
    error = caught.value.body
    assert isinstance(error, dict) and error.keys() == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"].startswith(param)
    assert mock.received == []
    assert admin_get(server, "/conversations/bad").status_code == 404


def test_streamed_events_are_relayed_byte_for_byte(mock, start_proxy) -> None:
    provider = ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_FOUR_INTERACTIONS, policies=FROZEN))
    api = client(server)
    with api.responses.with_streaming_response.create(
        model="gpt-4o",
        instructions=INSTRUCTIONS,
        input=long_input(),
        stream=True,
        extra_headers={"X-Conversation-Id": "streamed"},
    ) as response:
        assert response.headers["x-compaction"] == "applied"
        received = b"".join(response.iter_bytes())
    assert received == provider.sent_streams[-1]
    sent = provider.responses_requests()[-1]["input"]
    assert summary_items(sent) == [1] and sent[0] == DEVELOPER
    assert sent[-1] == {"type": "message", "role": "user", "content": "last step"}

    # The SDK reads the relayed events as the provider's.
    events = list(
        api.responses.create(
            model="gpt-4o",
            instructions=INSTRUCTIONS,
            input=long_input(),
            stream=True,
            extra_headers={"X-Conversation-Id": "streamed"},
        )
    )
    assert [e.type for e in events][-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "done: ok"
