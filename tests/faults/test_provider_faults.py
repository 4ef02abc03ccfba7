"""Providers as they really answer, each driven by the official SDK against a real
proxy and a real mock provider on loopback ports:

- a provider that compresses its answers (every SDK sends ``Accept-Encoding: gzip, deflate``):
  the overflow rescue, the window it teaches and the usage it reports are still read, while the
  client gets the provider's compressed bytes as they were;
- the ``anthropic`` SDK's calls outside ``/v1/messages`` (models, files): they reach the Anthropic
  upstream, never the OpenAI one with an Anthropic key;
- a reasoning model that thinks before its first output on a streamed ``/v1/responses``: the
  client sees ``response.created`` at once, and an overflow is still rescued.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from proxy.config.settings import Settings
from tests.support.clients import openai_client
from tests.support.config import COMPACTING, FROZEN, SUMMARIZER_MODEL, config, summarizing
from tests.support.mock_upstream import MockUpstream, Received, Reply, json_reply
from tests.support.provider import SYSTEM, Provider
from tests.support.responses_provider import INSTRUCTIONS, ResponsesProvider, long_input
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

MODEL = "house-model"  # in no table: only the provider's overflow answer tells its window
NEAR_THE_WINDOW = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"context_fraction": 0.8},
    "keep": {"interactions": 2},
}


def near_the_window(provider: str, **sections: Any) -> Settings:
    """A summary as the model's window fills (a window learned from an overflow answer)."""
    return config(COMPACTING, sections, provider=provider, policies={"default": NEAR_THE_WINDOW})


STEP = "Step {n}: " + "edit the parser, run the tests, report the failures. " * 8  # ~90 tokens


@pytest.fixture
def upstream(mock: MockUpstream, tiktoken_files: object) -> MockUpstream:
    """The OpenAI-compatible provider (it counts tokens as the proxy does)."""
    return mock


@pytest.fixture
def anthropic_upstream(second_mock: MockUpstream) -> MockUpstream:
    return second_mock


def caller_client(server: ThreadedUvicorn, conversation: str, **options: Any) -> openai.OpenAI:
    return openai_client(server, conversation, key="sk-openai-caller", timeout=30, **options)


# --- a provider that compresses its answers ------------------------------------------------------


def chat_turns(client: openai.OpenAI, turns: int, *, stream: bool) -> list[dict[str, str]]:
    """``turns`` user turns of one conversation; the response headers of each."""
    history: list[dict[str, Any]] = [SYSTEM]
    seen = []
    for n in range(turns):
        history.append({"role": "user", "content": STEP.format(n=n)})
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=history, stream=stream
        )
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        else:
            text = raw.parse().choices[0].message.content
        assert text.startswith("done: saw"), text
        history.append({"role": "assistant", "content": text})
        seen.append(dict(raw.headers))
    return seen


def conversation_requests(upstream: MockUpstream) -> list[Received]:
    """The conversation's chat requests (not the summarizer's: the proxy's own client)."""
    return [r for r in upstream.chat_requests() if r.json()["model"] != SUMMARIZER_MODEL]


@pytest.mark.parametrize(
    ("coding", "stream"), [("gzip", False), ("gzip", True), ("deflate", False)]
)
def test_a_compressed_overflow_answer_is_rescued_and_teaches_the_window(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn], coding: str, stream: bool
) -> None:
    """The issue's run: a model known nowhere, a provider behind a gzip middleware. Unread, its
    compressed context_length_exceeded reached the client (BadRequestError from turn 5 on)."""
    provider = Provider(upstream)
    provider.window_tokens = 700
    upstream.compression = coding
    # Recall off: a stream it watches goes out decoded (tests/recall/test_recall_after_text.py).
    sections = {"upstream": {"discover_windows": False}, "recall": {"enabled": False}}
    server = start_proxy(near_the_window(upstream.url, **sections))

    seen = chat_turns(caller_client(server, f"gz-{coding}-{stream}"), 14, stream=stream)

    retried = [i for i, h in enumerate(seen) if h.get("x-compaction-retried")]
    assert len(retried) == 1, [h.get("x-compaction") for h in seen]
    assert provider.overflows == 1  # the window was learned: never exceeded again
    assert {h["x-compaction"] for h in seen[retried[0] + 1 :]} == {"applied"}
    # The client got the provider's bytes as they were: compressed, as it accepted.
    assert all(h["content-encoding"] == coding for h in seen)
    assert {r.headers["accept-encoding"] for r in conversation_requests(upstream)} == {
        "gzip, deflate"
    }


def test_codings_the_proxy_cannot_read_are_not_asked_for_where_it_reads_the_answer(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    """A Node client (fetch) accepts br and zstd too: where the proxy must read the answer (a
    compacted request), the provider is asked only for what the proxy can decode; an untouched
    request and a pass-through path go out with the client's header as sent."""
    provider = Provider(upstream)
    provider.window_tokens = 700
    upstream.compression = "gzip"
    server = start_proxy(near_the_window(upstream.url, upstream={"discover_windows": False}))
    node = {"Accept-Encoding": "br, gzip;q=0.8, zstd, deflate;q=0.5"}
    seen = chat_turns(caller_client(server, "node", headers=node), 14, stream=False)
    assert len([h for h in seen if h.get("x-compaction-retried")]) == 1
    assert {r.headers["accept-encoding"] for r in conversation_requests(upstream)} == {
        "gzip;q=0.8, deflate;q=0.5"
    }

    only_br = {"Accept-Encoding": "br"}
    chat_turns(caller_client(server, "br", headers=only_br), 1, stream=False)
    assert conversation_requests(upstream)[-1].headers["accept-encoding"] == "identity"

    off = {**node, "X-Compaction": "off"}
    chat_turns(caller_client(server, "off", headers=off), 1, stream=False)
    assert conversation_requests(upstream)[-1].headers["accept-encoding"] == node["Accept-Encoding"]
    caller_client(server, "models", headers=node).models.list()
    assert upstream.received[-1].headers["accept-encoding"] == node["Accept-Encoding"]


# --- the anthropic SDK outside /v1/messages ------------------------------------------------------


def anthropic_api(request: Received) -> Reply:
    """Anthropic's answers to the calls the test makes (shapes from its API reference)."""
    model = {
        "id": "claude-house-1",
        "type": "model",
        "display_name": "Claude House",
        "created_at": "2025-01-01T00:00:00Z",
    }
    if request.path == "/v1/models":
        page = {"data": [model], "has_more": False, "first_id": model["id"], "last_id": model["id"]}
        return json_reply(page)
    if request.path.startswith("/v1/models/"):
        return json_reply({**model, "id": request.path.rsplit("/", 1)[1]})
    if request.path == "/v1/files":
        return json_reply({"data": [], "has_more": False, "first_id": None, "last_id": None})
    return json_reply({"type": "error", "error": {"type": "not_found_error"}}, status=404)


@pytest.mark.parametrize("credential", ["api_key", "auth_token"])
def test_anthropic_sdk_calls_outside_messages_reach_only_the_anthropic_upstream(
    upstream: MockUpstream,
    anthropic_upstream: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
    credential: str,
) -> None:
    anthropic_upstream.default = anthropic_api
    settings = near_the_window(
        upstream.url, upstream={"anthropic_base_url": anthropic_upstream.url}
    )
    server = start_proxy(settings)
    key = "sk-ant-api03-caller-secret"
    client = closed_after_test(
        anthropic.Anthropic(base_url=server.url, max_retries=0, **{credential: key})
    )

    assert [m.id for m in client.models.list()] == ["claude-house-1"]
    assert client.models.retrieve("claude-house-2").id == "claude-house-2"
    assert list(client.beta.files.list()) == []

    assert upstream.received == [], [(r.method, r.path) for r in upstream.received]
    got = anthropic_upstream.received
    assert [(r.method, r.path) for r in got] == [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/claude-house-2"),
        ("GET", "/v1/files"),
    ]
    for request in got:
        assert request.headers["anthropic-version"]
        sent = request.headers.get("x-api-key") or request.headers["authorization"]
        assert sent.endswith(key)

    # The openai SDK's own calls still go to the OpenAI-compatible upstream.
    caller_client(server, "models").models.list()
    assert [(r.path, r.headers["authorization"]) for r in upstream.received] == [
        ("/v1/models", "Bearer sk-openai-caller")
    ]
    assert len(anthropic_upstream.received) == 3


# --- a reasoning model that thinks before it answers ---------------------------------------------


THINK_SECONDS = 1.5
# Never compacts on its own: only an overflow makes the proxy cut.
NEVER = {
    "strategy": "summarize",
    "trigger": {"interactions": 100, "context_fraction": 0},
    "keep": {"interactions": 1},
}
INPUT_ITEMS = len(long_input())


def timed_events(raw: Any, started: float) -> list[tuple[str, float]]:
    return [(event.type, time.monotonic() - started) for event in raw.parse()]


def test_a_thinking_models_response_created_reaches_the_client_at_once(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    provider = ResponsesProvider(upstream)
    provider.think_seconds = THINK_SECONDS
    server = start_proxy(summarizing(upstream.url, policy=NEVER, policies=FROZEN))
    client = caller_client(server, "thinking")

    started = time.monotonic()
    raw = client.responses.with_raw_response.create(
        model="gpt-4o", instructions=INSTRUCTIONS, input=long_input(), stream=True
    )
    events = timed_events(raw, started)
    assert raw.headers["x-compaction"] == "skipped"  # compacted route, a retry was possible
    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    created = events[0][1]
    first_output = next(t for name, t in events if name == "response.output_text.delta")
    assert first_output >= THINK_SECONDS
    assert created < first_output - THINK_SECONDS / 2, events


def test_a_streamed_overflow_is_still_rescued_into_a_completed_response(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    """The provider fails the stream (response.created, response.in_progress, response.failed
    context_length_exceeded) as soon as it has read the input: the client, through the SDK's
    stream helper, still ends with one completed response, the compacted retry's."""
    provider = ResponsesProvider(upstream)
    provider.overflow_in_stream = True
    provider.max_items = INPUT_ITEMS // 2
    server = start_proxy(summarizing(upstream.url, policy=NEVER, policies=FROZEN))
    client = caller_client(server, "rescued")

    with client.responses.stream(
        model="gpt-4o", instructions=INSTRUCTIONS, input=long_input()
    ) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert names.count("response.created") == 1 and "response.failed" not in names
    first, retried = provider.responses_requests()
    assert len(first["input"]) == INPUT_ITEMS and len(retried["input"]) <= INPUT_ITEMS // 2
    assert provider.chat.summaries == 1

    # Its headers say so: they were not out yet when the failure came.
    raw = caller_client(server, "rescued-again").responses.with_raw_response.create(
        model="gpt-4o", instructions=INSTRUCTIONS, input=long_input(), stream=True
    )
    assert [e.type for e in raw.parse()][-1] == "response.completed"
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"


def test_with_no_hold_a_late_overflow_reaches_the_client_as_sent(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    """upstream.stream_hold_seconds: 0 relays the opening events at once: an in-stream failure
    then reaches the client as the provider sent it (documented), never a changed stream."""
    provider = ResponsesProvider(upstream)
    provider.overflow_in_stream = True
    provider.max_items = INPUT_ITEMS // 2
    settings = summarizing(
        upstream.url, policy=NEVER, policies=FROZEN, upstream={"stream_hold_seconds": 0}
    )
    server = start_proxy(settings)
    raw = caller_client(server, "no-hold").responses.with_raw_response.create(
        model="gpt-4o", instructions=INSTRUCTIONS, input=long_input(), stream=True
    )
    names = [e.type for e in raw.parse()]
    assert names == ["response.created", "response.in_progress", "response.failed"]
    assert len(provider.responses_requests()) == 1


def test_a_compressed_stream_is_still_read_for_its_overflow(
    upstream: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    provider = ResponsesProvider(upstream)
    provider.overflow_in_stream = True
    provider.max_items = INPUT_ITEMS // 2
    upstream.compression = "gzip"
    server = start_proxy(summarizing(upstream.url, policy=NEVER, policies=FROZEN))
    raw = caller_client(server, "gz-stream").responses.with_raw_response.create(
        model="gpt-4o", instructions=INSTRUCTIONS, input=long_input(), stream=True
    )
    assert [e.type for e in raw.parse()][-1] == "response.completed"
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"
    assert raw.headers["content-encoding"] == "gzip"
