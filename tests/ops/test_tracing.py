"""OpenTelemetry traces (docs/operations.md, "Traces"): a real proxy in front of the
scripted provider, exporting over OTLP/HTTP to a real receiver this test starts
(tests/ops/otlp_receiver.py decodes the protobuf), driven by the official openai client with a
``traceparent`` of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from proxy import tracing
from proxy.ops.tracing import wanted
from tests.ops.otlp_receiver import OTLPReceiver
from tests.support.anthropic_provider import AnthropicProvider
from tests.support.clients import KEY, openai_client
from tests.support.config import EVERY_THREE_INTERACTIONS, summarizing
from tests.support.provider import SUMMARIZER_MODEL, SYSTEM, Provider
from tests.support.proxies import running_proxies

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
SECRET_WORD = "zebra-marmalade"  # in every user message: must appear in no span


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OTLPReceiver]:
    """A receiver, and the standard environment that points the proxy's traces at it."""
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "proxy-under-test")
        yield receiver


def talk(url_of_proxy_settings, turns: int, *, headers: dict[str, str]) -> list[dict[str, str]]:
    """``turns`` user turns of one conversation through a proxy started (and stopped, which
    flushes its spans) for the occasion; the answers' headers."""
    seen = []
    with running_proxies() as start:
        server = start(url_of_proxy_settings)
        client = openai_client(server, headers=headers)
        history = [SYSTEM]
        for turn in range(turns):
            text = f"Step {turn}: {SECRET_WORD} " + "with a long description " * 60
            history.append({"role": "user", "content": text})
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
            seen.append(dict(raw.headers))
            history.append(raw.parse().choices[0].message.model_dump(exclude_none=True))
        httpx.get(f"{server.url}/v1/models", headers={"authorization": f"Bearer {KEY}"})
    return seen


@pytest.mark.redis
def test_a_compacted_conversation_is_traced_after_the_genai_conventions(
    mock, provider: Provider, receiver: OTLPReceiver, redis_url: str
) -> None:
    settings = summarizing(mock.url, redis_url, policy=EVERY_THREE_INTERACTIONS)
    answers = talk(settings, 5, headers={"traceparent": TRACEPARENT})
    assert "applied" in [a["x-compaction"] for a in answers]

    spans = receiver.spans
    requests = [s for s in spans if s.kind == "server" and s.name == "chat gpt-4o"]
    assert len(requests) == 5
    # Each continues the client's trace, as a child of the client's span.
    assert {(s.trace_id, s.parent_id) for s in requests} == {(TRACE_ID, CLIENT_SPAN)}
    assert requests[0].resource["service.name"] == "proxy-under-test"
    last = next(s for s in requests if s.attributes.get("compaction.outcome") == "applied")
    attrs = last.attributes
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-4o"
    assert attrs["compaction.route"] == "chat"
    assert attrs["compaction.policy"] == "default"
    assert attrs["compaction.tokens_after"] < attrs["compaction.tokens_before"]
    assert attrs["http.response.status_code"] == 200
    # The provider's usage (the mock answers 10 prompt and 5 completion tokens).
    assert attrs["gen_ai.usage.input_tokens"] == 10
    assert attrs["gen_ai.usage.output_tokens"] == 5

    # Beneath it: the store, the plan (again after the inline summary), the summarizer, the
    # provider call.
    below = {s.name for s in last.children(spans)}
    assert {"store", "compaction.plan", f"chat {SUMMARIZER_MODEL}", "POST"} <= below
    stores = [s.attributes for s in last.children(spans) if s.name == "store"]
    assert {"compaction.store": "redis"} in stores
    # The plan's size, and what recall's stubs, index and tool added to it.
    plans = [s.attributes for s in last.children(spans) if s.name == "compaction.plan"]
    planned = attrs["compaction.tokens_after"] - attrs.get("compaction.recall.notes_tokens", 0)
    assert planned in [p["compaction.tokens_after"] for p in plans]

    # Each summarizer call is a GenAI CLIENT span of its own, with its usage.
    summaries = receiver.named(f"chat {SUMMARIZER_MODEL}")
    assert len(summaries) == provider.summaries >= 1
    call = summaries[0]
    assert call.kind == "client" and call.trace_id == TRACE_ID
    assert call.parent_id in {s.span_id for s in requests}
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.request.model"] == SUMMARIZER_MODEL
    assert call.attributes["gen_ai.usage.output_tokens"] > 0

    # The provider continues the trace: its traceparent names the proxy's span, not the client's.
    chats = [r for r in mock.received if r.path.endswith("/chat/completions")]
    answered = [r for r in chats if r.json()["model"] == "gpt-4o"]
    provider_calls = {s.span_id: s for s in spans if s.name == "POST"}
    for request in answered:
        _, trace, parent, _ = request.headers["traceparent"].split("-")
        assert trace == TRACE_ID and parent in provider_calls
    summarized = [r for r in chats if r.json()["model"] == SUMMARIZER_MODEL]
    assert {r.headers["traceparent"].split("-")[2] for r in summarized} == {
        s.span_id for s in summaries
    }

    # A request passed through is a span too, named by its method.
    (models,) = receiver.named("GET passthrough")
    assert models.attributes["http.response.status_code"] == 200

    # Never message content or a key in what was exported.
    exported = json.dumps([s.attributes for s in spans] + [s.resource for s in spans])
    assert SECRET_WORD not in exported and KEY not in exported


def test_off_by_default_the_trace_header_crosses_untouched(mock, monkeypatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    with OTLPReceiver() as receiver:
        talk(summarizing(mock.url), 2, headers={"traceparent": TRACEPARENT})
    assert receiver.posts == 0
    sent = [r for r in mock.received if r.path.endswith("/chat/completions")]
    assert [r.headers["traceparent"] for r in sent] == [TRACEPARENT] * 2


def test_a_request_without_a_trace_starts_one(mock, receiver: OTLPReceiver) -> None:
    talk(summarizing(mock.url), 1, headers={})
    (request,) = [s for s in receiver.spans if s.kind == "server" and s.name == "chat gpt-4o"]
    assert request.parent_id == ""
    (sent,) = [r for r in mock.received if r.path.endswith("/chat/completions")]
    assert sent.headers["traceparent"].split("-")[1] == request.trace_id


@pytest.mark.parametrize(
    ("environ", "exporter"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, None),
    ],
)
def test_which_environment_turns_traces_on(environ: dict[str, str], exporter: str | None) -> None:
    assert wanted(environ) == exporter


def test_off_every_call_returns_at_once() -> None:
    """No tracer installed (no OTEL_* environment): one shared do-nothing context manager, the
    outgoing headers the very list they were, nothing recorded."""
    assert not tracing.on
    assert tracing.span("compaction.plan") is tracing.span(tracing.RECALL_ROUND)
    with tracing.span("store") as nothing:
        assert nothing is None
    headers = [(b"traceparent", TRACEPARENT.encode())]
    assert tracing.outgoing(headers) is headers
    assert tracing.provider_call("POST", "https://api.example/v1?key=x") is None


def test_an_anthropic_messages_request_is_anthropics_in_its_span(
    mock, second_mock, receiver: OTLPReceiver
) -> None:
    """The official anthropic client through /v1/messages: the span names the provider
    ``anthropic`` and its usage; the Anthropic upstream continues the trace."""
    AnthropicProvider(second_mock)
    settings = summarizing(mock.url, upstream={"anthropic_base_url": second_mock.url})
    with running_proxies() as start:
        server = start(settings)
        client = anthropic.Anthropic(
            base_url=server.url,
            api_key=KEY,
            max_retries=0,
            default_headers={"X-Conversation-Id": "conv-a", "traceparent": TRACEPARENT},
        )
        with client:
            client.messages.create(
                model="claude-mock-1",
                max_tokens=64,
                messages=[{"role": "user", "content": f"Hello {SECRET_WORD}"}],
            )
    (request,) = receiver.named("chat claude-mock-1")
    assert (request.trace_id, request.parent_id) == (TRACE_ID, CLIENT_SPAN)
    attrs = request.attributes
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["compaction.route"] == "messages"
    assert attrs["gen_ai.usage.input_tokens"] == 10 and attrs["gen_ai.usage.output_tokens"] == 5
    (sent,) = [r for r in second_mock.received if r.path.endswith("/messages")]
    (call,) = [s for s in request.children(receiver.spans) if s.kind == "client"]
    assert sent.headers["traceparent"].split("-")[1:3] == [TRACE_ID, call.span_id]
    assert SECRET_WORD not in json.dumps([s.attributes for s in receiver.spans])
