"""The cache breakpoint after what the proxy injects into an Anthropic prompt: the
official ``anthropic`` SDK, a real proxy, the mock Anthropic provider (which refuses a fifth
mark and an hour's mark after a five minutes' one, as the API does), asserting what it received.

What a user notices: once a summary is in ``system``, it ends with a ``cache_control`` mark, so
the compacted prefix is cached; the client's own marks arrive where it put them; a request that
already holds four marks gets none more; a request the proxy leaves alone gets nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest

from tests.support.anthropic_provider import (
    SUMMARY_OPEN,
    AnthropicProvider,
    cache_marks,
    mark_problems,
    problems,
    summaries_in,
)
from tests.support.config import EVERY_THREE_INTERACTIONS, summarizing
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

MODEL = "claude-mock-1"
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def system(mark: dict[str, Any] | None = EPHEMERAL) -> list[dict[str, Any]]:
    block: dict[str, Any] = {"type": "text", "text": "You are a careful coding agent."}
    return [{**block, "cache_control": mark}] if mark else [block]


def tools(mark: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    tool: dict[str, Any] = {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    return [{**tool, "cache_control": mark}] if mark else [tool]


def history(turns: int, *, marks: int = 1, mark: dict[str, Any] = EPHEMERAL) -> list[dict]:
    """``turns`` user turns (answered but the last), long enough for a summary to pay off;
    the newest turn in ``marks`` blocks, each with a cache mark."""
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        text = f"Step {n}: fix src/m{n}.py. " + "Be thorough. " * 12
        messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        if n < turns - 1:
            reply = f"Fixed src/m{n}.py. " + "Done carefully. " * 12
            messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
    newest = messages[-1]["content"]
    newest += [{"type": "text", "text": f"(note {k})"} for k in range(1, marks)]
    for block in newest:
        block["cache_control"] = mark
    return messages


@pytest.fixture
def provider(second_mock: MockUpstream) -> AnthropicProvider:
    return AnthropicProvider(second_mock)


@pytest.fixture
def server(mock: MockUpstream, second_mock: MockUpstream, start_proxy) -> ThreadedUvicorn:
    """A proxy summarizing inline every three interactions (the summarizer: ``mock``)."""
    Provider(mock)
    settings = summarizing(
        mock.url,
        policy=EVERY_THREE_INTERACTIONS,
        upstream={"anthropic_base_url": second_mock.url},
    )
    return start_proxy(settings)


def send(server: ThreadedUvicorn, messages: list[dict], **options: Any) -> str:
    """One request of conversation ``conv-1``; the X-Compaction outcome."""
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key="sk-ant-caller-one",
            max_retries=0,
            default_headers={"X-Conversation-Id": "conv-1"},
        )
    )
    options.setdefault("system", system())
    options.setdefault("tools", tools())
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=256, messages=messages, **options
    )
    return raw.headers["x-compaction"]


def the_summary(received: dict[str, Any]) -> dict[str, Any]:
    assert len(summaries_in(received)) == 1
    block = received["system"][-1]
    assert block["text"].startswith(SUMMARY_OPEN)
    return block


def check_clients_marks_kept(received: dict[str, Any], sent: list[dict], **options: Any) -> None:
    """The client's system blocks and tools as it sent them; the messages a suffix of its own,
    cache marks and all."""
    assert problems(received) == mark_problems(received) == []
    assert received["system"][: len(options["system"])] == options["system"]
    # The client's tools first, as sent (the recall tool may follow them: docs/recall.md).
    assert received["tools"][: len(options["tools"])] == options["tools"]
    messages = received["messages"]
    assert messages == sent[len(sent) - len(messages) :]


def test_the_injected_summary_ends_with_a_cache_mark(
    server: ThreadedUvicorn, provider: AnthropicProvider
) -> None:
    sent = history(8)
    options = {"system": system(), "tools": tools()}
    assert send(server, copy.deepcopy(sent), **options) == "applied"

    received = provider.requests()[-1]
    check_clients_marks_kept(received, sent, **options)
    assert the_summary(received)["cache_control"] == EPHEMERAL
    assert len(cache_marks(received)) == 3  # the client's two and the proxy's one


def test_no_mark_is_added_to_a_request_holding_four(
    server: ThreadedUvicorn, provider: AnthropicProvider
) -> None:
    sent = history(8, marks=2)
    options = {"system": system(), "tools": tools(EPHEMERAL)}
    assert send(server, copy.deepcopy(sent), **options) == "applied"

    received = provider.requests()[-1]
    check_clients_marks_kept(received, sent, **options)
    assert "cache_control" not in the_summary(received)
    assert len(cache_marks(received)) == 4


def test_a_top_level_mark_counts_as_one_of_the_four(
    server: ThreadedUvicorn, provider: AnthropicProvider
) -> None:
    sent = history(8, marks=1)
    options = {"system": system(), "tools": tools(EPHEMERAL)}
    assert send(server, copy.deepcopy(sent), cache_control=EPHEMERAL, **options) == "applied"

    received = provider.requests()[-1]
    check_clients_marks_kept(received, sent, **options)
    assert received["cache_control"] == EPHEMERAL
    assert "cache_control" not in the_summary(received)


def test_the_mark_takes_an_hour_when_a_later_client_mark_does(
    server: ThreadedUvicorn, provider: AnthropicProvider
) -> None:
    sent = history(8, mark=HOUR)
    options = {"system": system(HOUR), "tools": tools()}
    assert send(server, copy.deepcopy(sent), **options) == "applied"

    received = provider.requests()[-1]
    check_clients_marks_kept(received, sent, **options)  # the provider accepted the order
    assert the_summary(received)["cache_control"] == HOUR


def test_a_string_system_becomes_blocks_and_the_summary_is_marked(
    server: ThreadedUvicorn, provider: AnthropicProvider
) -> None:
    sent = history(8)
    assert send(server, copy.deepcopy(sent), system="Be brief.") == "applied"

    received = provider.requests()[-1]
    assert problems(received) == mark_problems(received) == []
    assert received["system"][0] == {"type": "text", "text": "Be brief."}
    assert the_summary(received)["cache_control"] == EPHEMERAL


def test_a_request_left_alone_gets_no_mark(
    server: ThreadedUvicorn, provider: AnthropicProvider, second_mock: MockUpstream
) -> None:
    sent = history(2)
    assert send(server, copy.deepcopy(sent)) == "skipped"

    received = provider.requests()[-1]
    assert received["system"] == system()
    assert received["messages"] == sent
    assert len(cache_marks(received)) == 2
