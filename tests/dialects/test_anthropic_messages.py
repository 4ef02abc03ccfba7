"""``POST /v1/messages`` end to end: the official ``anthropic`` SDK, a real proxy, a mock Anthropic
provider on its own port (``upstream.anthropic_base_url``), and the OpenAI-compatible mock that
writes the summaries (the summarizer stays a chat completions call).

What a user notices: the summary arrives in ``system`` once, after the client's own system text;
the first message is a user turn; tool_use/tool_result pairs stay whole; thinking blocks and
cache_control marks arrive exactly as the client sent them; the task and the newest round are
verbatim; errors are in Anthropic's shape; streams and the off switch are byte for byte.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.anthropic_provider import (
    SUMMARY_OPEN,
    AnthropicProvider,
    problems,
    sse_events,
    summaries_in,
    system_texts,
)
from tests.support.clients import admin_get
from tests.support.config import AGENT_RUN, EVERY_THREE_INTERACTIONS, merged, summarizing
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

KEY = "sk-ant-caller-one"
MODEL = "claude-mock-1"
SYSTEM = [
    {
        "type": "text",
        "text": "You are a careful coding agent.",
        "cache_control": {"type": "ephemeral"},
    }
]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


# The default policy's trigger and keep are token counts: tests whose figures depend on them skip,
# with the suite's "tiktoken files unavailable" message, where tiktoken's files cannot be had.
EXACT_COUNTS = pytest.mark.usefixtures("tiktoken_files")


# An agent run summarized past 1200 input tokens, its newest 500 tokens kept.
POLICY = {
    **AGENT_RUN,
    "trigger": {"input_tokens": 1200, "context_fraction": 0},
    "keep": {"tokens": 500},
}


@pytest.fixture
def anthropic_mock(second_mock: MockUpstream) -> MockUpstream:
    """The Anthropic API's upstream (``upstream.anthropic_base_url``)."""
    return second_mock


@pytest.fixture
def openai_mock(mock: MockUpstream) -> MockUpstream:
    """The OpenAI-compatible upstream: only the summarizer (and window discovery) call it."""
    return mock


@pytest.fixture
def summarizer(openai_mock: MockUpstream) -> Provider:
    return Provider(openai_mock)


@pytest.fixture
def messages_provider(anthropic_mock: MockUpstream) -> AnthropicProvider:
    """The scripted Anthropic Messages provider."""
    return AnthropicProvider(anthropic_mock)


@pytest.fixture
def serve(
    openai_mock: MockUpstream,
    anthropic_mock: MockUpstream,
    start_proxy,
) -> Callable[..., ThreadedUvicorn]:
    """serve(policy=..., **sections) -> a proxy in front of both upstreams."""

    def start(*, policy: dict[str, Any] = POLICY, **sections: Any) -> ThreadedUvicorn:
        to_anthropic = {"upstream": {"anthropic_base_url": anthropic_mock.url}}
        sections = merged(to_anthropic, sections)
        return start_proxy(summarizing(openai_mock.url, policy=policy, **sections))

    return start


def sdk(**options: Any) -> anthropic.Anthropic:
    return closed_after_test(anthropic.Anthropic(max_retries=0, **options))


def anthropic_client(
    server: ThreadedUvicorn, conversation: str | None = "conv-1", key: str = KEY, **options: Any
) -> anthropic.Anthropic:
    headers = {"X-Conversation-Id": conversation} if conversation else {}
    return sdk(base_url=server.url, api_key=key, default_headers=headers, **options)


def marked(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as a client like Claude Code sends it: a cache mark on the newest block,
    which moves every turn."""
    sent = copy.deepcopy(history)
    sent[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return sent


class Agent:
    """Plays the client: user turns, tool results, and what it sent each time."""

    def __init__(self, client: anthropic.Anthropic, history: list[dict[str, Any]] | None = None):
        self.client = client
        self.history: list[dict[str, Any]] = history if history is not None else []
        self.sent: list[list[dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []

    def turn(self, text: str, *, rounds: int = 0, padding: int = 0) -> None:
        """One user turn; with ``rounds``, a task of that many tool rounds (the last result says
        LAST), each result ``padding`` lines long."""
        self.history.append({"role": "user", "content": [{"type": "text", "text": text}]})
        done = 0
        while True:
            sent = marked(self.history)
            raw = self.client.messages.with_raw_response.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=sent, tools=TOOLS
            )
            self.sent.append(sent)
            self.headers.append(dict(raw.headers))
            reply = raw.parse()
            self.history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            if reply.stop_reason != "tool_use":
                return
            done += 1
            self.history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": b.id,
                            "content": f"contents of {json.dumps(b.input)}"
                            + "".join(
                                f"\nline {i} of round {done}: x = {i * done}"
                                for i in range(padding)
                            )
                            + (" LAST" if done >= rounds else ""),
                        }
                        for b in reply.content
                        if b.type == "tool_use"
                    ],
                }
            )


def check_sent(received: dict[str, Any], sent: list[dict[str, Any]]) -> None:
    """What any request the provider gets must look like, next to what the client sent."""
    assert problems(received) == []
    assert received["system"][0] == SYSTEM[0]  # the client's block, cache mark and all
    summaries = summaries_in(received)
    assert len(summaries) <= 1
    if summaries:
        assert system_texts(received)[-1] == summaries[0]
        assert summaries[0].count(SUMMARY_OPEN) == 1 and summaries[0].count("</agent_summary>") == 1
    messages = received["messages"]
    assert messages[0]["role"] == "user"
    assert messages[-1] == sent[-1]  # the newest turn verbatim, its moved cache mark included
    # Every message is one the client sent, unchanged; a suffix of them, after at most the task.
    start = 0 if messages == sent[-len(messages) :] else 1
    assert messages[start:] == sent[len(sent) - len(messages) + start :]
    if start:
        assert messages[0] in sent and messages[0]["content"][0]["type"] == "text"


@EXACT_COUNTS
def test_an_agent_is_compacted_with_everything_kept_whole(
    serve, messages_provider, summarizer
) -> None:
    server = serve()
    agent = Agent(anthropic_client(server))
    for n in range(6):
        agent.turn(f"Step {n}: update src/module_{n}.py TOOL", rounds=2, padding=8)

    received = messages_provider.requests()
    assert len(received) == len(agent.sent)
    for body, sent in zip(received, agent.sent, strict=True):
        check_sent(body, sent)
    outcomes = [h["x-compaction"] for h in agent.headers]
    assert "applied" in outcomes and "failed" not in outcomes
    last = received[-1]
    assert len(summaries_in(last)) == 1 and "SUMMARY-" in summaries_in(last)[0]
    assert len(last["messages"]) < len(agent.sent[-1]) / 2
    # Thinking blocks reach the provider as the provider wrote them (signature and all).
    thinking = [
        b
        for m in last["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]
    assert thinking and all(b["signature"].startswith("sig-") for b in thinking)
    # The summarizer read the neutral transcript, tool calls included.
    transcript = json.dumps(summarizer.summary_requests())
    assert "read_file" in transcript and "Step 0" in transcript
    record = admin_get(server, "/conversations/conv-1", key=KEY).json()
    assert record["checkpoints"][0]["summary"] in summaries_in(last)[0]


def test_a_cut_inside_a_long_task_sends_the_task_again(
    serve, messages_provider, summarizer
) -> None:
    server = serve()
    agent = Agent(anthropic_client(server, "agent-run"))
    agent.turn("AGENT: fix the failing tests TOOL", rounds=14, padding=10)

    last = messages_provider.requests()[-1]
    check_sent(last, agent.sent[-1])
    assert summaries_in(last)
    assert last["messages"][0] == agent.history[0]  # the task, verbatim
    assert last["messages"][1]["role"] == "assistant"  # then whole rounds
    assert agent.headers[-1]["x-compaction"] == "applied"


@EXACT_COUNTS
def test_moving_cache_marks_do_not_lose_the_checkpoint(
    serve, messages_provider, summarizer
) -> None:
    server = serve()
    agent = Agent(anthropic_client(server, "marks"))
    for n in range(5):
        agent.turn(f"Step {n} TOOL", rounds=2, padding=8)
    summaries = summarizer.summaries
    assert summaries >= 1
    # The same history sent again, marks moved to other blocks: the stored summary applies as is.
    again = copy.deepcopy(agent.history)
    for turn in again:
        for block in turn["content"]:
            block.pop("cache_control", None)
    again[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    again.append({"role": "user", "content": [{"type": "text", "text": "and now?"}]})
    raw = anthropic_client(server, "marks").messages.with_raw_response.create(
        model=MODEL, max_tokens=64, system=SYSTEM, messages=again, tools=TOOLS
    )
    assert raw.headers["x-compaction"] == "applied"
    assert summarizer.summaries == summaries  # nothing summarized again
    assert summaries_in(messages_provider.requests()[-1])


@EXACT_COUNTS
def test_forks_reuse_the_shared_summary_and_never_borrow_another(
    serve, messages_provider, summarizer
) -> None:
    server = serve()
    agent = Agent(anthropic_client(server, "fork"))
    for n in range(5):
        agent.turn(f"Step {n} TOOL", rounds=2, padding=8)
    record = admin_get(server, "/conversations/fork", key=KEY).json()
    stored = [c["summary"] for c in record["checkpoints"]]
    assert stored

    # A fork that keeps the summarized part and replaces the newest turn reuses the summary.
    fork = Agent(anthropic_client(server, "fork"), copy.deepcopy(agent.history[:-6]))
    fork.turn("a different question")
    last = messages_provider.requests()[-1]
    check_sent(last, fork.sent[-1])
    assert any(s in summaries_in(last)[0] for s in stored)

    # An edit inside the summarized part: no summary of what this history does not have.
    edited = copy.deepcopy(agent.history)
    edited[0]["content"][0]["text"] = "Step 0, reworded"
    other = Agent(anthropic_client(server, "fork"), edited)
    before = len(messages_provider.requests())
    other.turn("go on")
    sent = messages_provider.requests()[before]
    # (the texts themselves: a summary holds newlines, which json.dumps would escape)
    assert not any(s in text for text in system_texts(sent) for s in stored)


def keyed_client(
    server: ThreadedUvicorn, conversation: str, key: str, style: str
) -> anthropic.Anthropic:
    """A client sending its key as ``x-api-key`` (Anthropic's documented header, what older SDKs
    and curl send) or as a Bearer token (what this SDK sends)."""
    if style == "bearer":
        return anthropic_client(server, conversation, key=key)
    return sdk(
        base_url=server.url,
        api_key=None,
        default_headers={"X-Conversation-Id": conversation, "x-api-key": key},
    )


@pytest.mark.parametrize("style", ["x-api-key", "bearer"])
def test_tenants_come_from_the_callers_key(
    serve, messages_provider, summarizer, openai_mock, style: str
) -> None:
    # Triggered by interactions, not tokens: it runs where tiktoken's files cannot be had too.
    server = serve(policy=EVERY_THREE_INTERACTIONS)
    one = Agent(keyed_client(server, "shared-id", "sk-ant-one", style))
    for n in range(5):
        one.turn(f"Step {n} TOOL", rounds=2, padding=8)
    two = Agent(keyed_client(server, "shared-id", "sk-ant-two", style))
    two.turn("hello")

    assert admin_get(server, "/conversations/shared-id", key="sk-ant-one").status_code == 200
    assert admin_get(server, "/conversations/shared-id", key="sk-ant-two").status_code == 404
    assert not summaries_in(
        messages_provider.requests()[-1]
    )  # tenant two never sees tenant one's summary
    # The caller's key went to Anthropic, never to the summarizer's other host.
    sent = messages_provider.mock.received[0].headers
    assert (sent.get("x-api-key") or sent.get("authorization")).endswith("sk-ant-one")
    assert summarizer.summaries >= 1
    for request in openai_mock.chat_requests():
        assert "sk-ant" not in json.dumps(request.headers)


def test_the_proxys_key_and_anthropic_headers(serve, messages_provider, summarizer) -> None:
    server = serve(upstream={"anthropic_api_key": "sk-ant-proxy"})
    client = anthropic_client(server)
    client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    headers = messages_provider.mock.received[-1].headers
    assert headers["x-api-key"] == "sk-ant-proxy"
    assert headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert headers["anthropic-version"]  # the SDK's, relayed
    assert "x-conversation-id" not in headers

    counted = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    assert counted.input_tokens > 0
    assert messages_provider.mock.received[-1].path == "/v1/messages/count_tokens"
    assert messages_provider.mock.received[-1].headers["x-api-key"] == "sk-ant-proxy"


def capture() -> tuple[anthropic.DefaultHttpxClient, list[bytes]]:
    bodies: list[bytes] = []
    client = anthropic.DefaultHttpxClient(
        event_hooks={"request": [lambda r: bodies.append(r.read())]}
    )
    return client, bodies


@pytest.mark.parametrize("switch", ["header", "no-conversation", "below-trigger"])
def test_untouched_requests_are_byte_identical(
    serve, messages_provider, summarizer, switch: str
) -> None:
    server = serve()
    http, bodies = capture()
    extra = {"X-Compaction": "off"} if switch == "header" else {}
    conversation = None if switch == "no-conversation" else "conv-1"
    client = anthropic_client(server, conversation, http_client=http)
    history = [{"role": "user", "content": [{"type": "text", "text": "hi \u00e9 \U0001f600"}]}]
    client.messages.create(
        model=MODEL,
        max_tokens=16,
        system="plain string system",
        messages=history,
        extra_headers=extra,
        metadata={"user_id": "u-1"},
    )
    assert messages_provider.mock.received[-1].body == bodies[-1]


def test_a_body_over_the_limit_is_a_413_in_anthropics_shape(
    serve, messages_provider, summarizer
) -> None:
    server = serve(server={"max_body_bytes": 4096})
    client = anthropic_client(server, "big")
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "x" * 8000}]
        )
    assert caught.value.status_code == 413
    assert caught.value.body["error"]["type"] == "request_too_large"
    assert messages_provider.mock.received == []


@EXACT_COUNTS
def test_streams_are_relayed_byte_for_byte(serve, messages_provider, summarizer) -> None:
    server = serve()
    agent = Agent(anthropic_client(server, "stream"))
    for n in range(5):
        agent.turn(f"Step {n} TOOL", rounds=2, padding=8)
    history = marked(
        [*agent.history, {"role": "user", "content": [{"type": "text", "text": "sum up"}]}]
    )
    client = anthropic_client(server, "stream")
    with client.messages.stream(
        model=MODEL, max_tokens=64, system=SYSTEM, messages=history, tools=TOOLS
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("done: saw") and final.stop_reason == "end_turn"
    assert summaries_in(messages_provider.requests()[-1])  # compacted, and still a stream

    body = {"model": MODEL, "max_tokens": 64, "system": SYSTEM, "messages": history, "stream": True}
    headers = {"x-api-key": KEY, "x-conversation-id": "stream", "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, headers=headers) as response:
        relayed = response.read()
    answered = f"done: saw {len(messages_provider.requests()[-1]['messages'])} messages"
    assert relayed == b"".join(c for c in sse_events(answered, model=MODEL) if isinstance(c, bytes))


def test_window_discovery_never_sends_an_anthropic_key_to_the_openai_upstream(
    serve, messages_provider, summarizer, openai_mock
) -> None:
    server = serve()
    client = anthropic_client(server, "discover", key="sk-ant-secret")
    client.messages.create(
        model="house-model-7", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    for _ in range(500):  # the listing is asked in the background: wait for it, boundedly
        asks = [r for r in openai_mock.received if r.path.endswith("/models")]
        if asks:
            break
        client.messages.with_raw_response.create(
            model="house-model-7", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert asks
    assert all("sk-ant-secret" not in json.dumps(r.headers) for r in openai_mock.received)


def test_the_rest_of_the_messages_api_goes_to_anthropic_unchanged(
    serve, messages_provider, summarizer, openai_mock
) -> None:
    server = serve()
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    wrong = httpx.get(f"{server.url}/v1/messages", headers=headers)
    batches = httpx.get(f"{server.url}/v1/messages/batches?limit=2", headers=headers)
    assert wrong.status_code == batches.status_code == 404  # the mock's own answers
    assert wrong.json()["type"] == batches.json()["type"] == "error"
    reached = [(r.method, r.path, r.query) for r in messages_provider.mock.received]
    assert reached == [("GET", "/v1/messages", ""), ("GET", "/v1/messages/batches", "limit=2")]
    assert openai_mock.received == []
