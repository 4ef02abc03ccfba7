"""The per-conversation ledger end to end: a real proxy, mock providers that report
cached tokens, the official openai and anthropic clients, plain and streamed.

After a few turns the admin API's ledger and /metrics hold the provider's cached-token figures
and dollars at the configured prices; the client's bytes are the provider's; a store that fails
leaves every request answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.errors import StoreError
from proxy.state.conversations import Store
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy
from tests.support.anthropic_provider import message, sse_events
from tests.support.clients import KEY, admin_get, openai_client
from tests.support.config import (
    EVERY_THREE_INTERACTIONS,
    SUMMARIZER_MODEL,
    merged,
    summarizing,
)
from tests.support.mock_upstream import (
    ChatScript,
    MockUpstream,
    Received,
    Reply,
    completion,
    json_reply,
    sse_chunks,
    sse_reply,
)
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn
from tests.support.stores import store_settings

MODEL = "ledger-model-1"
CLAUDE = "claude-ledger-1"
PRICING = {
    "models": {
        "ledger-model*": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
        "claude-ledger*": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0},
        SUMMARIZER_MODEL: {"input": 1.0, "output": 4.0},
    }
}
# What the chat provider reports for every answer: 2000 prompt tokens, 1536 of them cached.
PROMPT, CACHED, OUTPUT = 2000, 1536, 50
CHAT_DOLLARS = ((PROMPT - CACHED) * 2.0 + CACHED * 0.5 + OUTPUT * 8.0) / 1e6
# The Anthropic provider: 100 uncached, 1800 read, 100 written, 40 out.
CLAUDE_DOLLARS = (100 * 3.0 + 1800 * 0.3 + 100 * 3.75 + 40 * 15.0) / 1e6
NEVER = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"interactions": 100, "context_fraction": 0},
    "keep": {"interactions": 2},
}


class CachingChat(ChatScript):
    """Chat completions whose usage says most of the prompt came from the cache; the summarizer's
    calls get a short summary. ``sent``: the body bytes of each answer to the conversation."""

    def __init__(self, mock: MockUpstream) -> None:
        super().__init__(mock)
        self.sent: list[bytes] = []

    def chat(self, body: dict[str, Any]) -> Reply:
        if body.get("model") == SUMMARIZER_MODEL:
            summary = completion("The user asked numbered questions.", model=SUMMARIZER_MODEL)
            usage = {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
            return json_reply({**summary, "usage": usage})
        usage = {
            "prompt_tokens": PROMPT,
            "completion_tokens": OUTPUT,
            "total_tokens": PROMPT + OUTPUT,
            "prompt_tokens_details": {"cached_tokens": CACHED},
        }
        text = f"answer to {len(body['messages'])} messages"
        if body.get("stream"):
            chunks = sse_chunks([text[:5], text[5:]], model=MODEL)
            last = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
            chunks.insert(
                -1, f"data: {json.dumps({**last, 'choices': [], 'usage': usage})}\n\n".encode()
            )
            reply = sse_reply(chunks)
        else:
            reply = json_reply({**completion(text, model=MODEL), "usage": usage})
        with self._lock:
            self.sent.append(b"".join(c for c in reply.chunks if isinstance(c, bytes)))
        return reply


def claude_reply(request: Received) -> Reply:
    """Anthropic Messages with cache figures; a stream states its input figures only in
    ``message_start``, and its text is long enough to push that out of the proxy's tail."""
    usage = {
        "input_tokens": 100,
        "cache_read_input_tokens": 1800,
        "cache_creation_input_tokens": 100,
        "output_tokens": 40,
    }
    if not request.json().get("stream"):
        return json_reply(message([{"type": "text", "text": "ok"}], model=CLAUDE, usage=usage))
    # ~20 KB of text: the head is long gone from an 8 KB tail.
    pieces = [f"word{i} " * 10 for i in range(200)]
    return sse_reply(sse_events("".join(pieces), model=CLAUDE, pieces=pieces, usage=usage))


def ledger_after(server: ThreadedUvicorn, conversation: str, requests: int, *, key: str = KEY):
    """The conversation's ledger once it counts ``requests`` (written just after each answer)."""
    deadline = time.monotonic() + 10
    while True:
        response = admin_get(server, f"/conversations/{conversation}/ledger", key=key)
        ledger = response.json().get("ledger") if response.status_code == 200 else None
        if ledger is not None and ledger["requests"] >= requests:
            return ledger
        assert time.monotonic() < deadline, response.text
        time.sleep(0.02)


def metric(server: ThreadedUvicorn, name: str, **labels: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


@pytest.fixture
def chat(mock: MockUpstream) -> CachingChat:
    return CachingChat(mock)


@pytest.fixture
def serve(
    mock: MockUpstream, second_mock: MockUpstream, start_proxy
) -> Callable[..., ThreadedUvicorn]:
    def start(policy: dict[str, Any] = EVERY_THREE_INTERACTIONS, **options: Any) -> ThreadedUvicorn:
        sections = {"pricing": PRICING, "upstream": {"anthropic_base_url": second_mock.url}}
        return start_proxy(summarizing(mock.url, policy=policy, **sections), **options)

    return start


@pytest.mark.usefixtures("tiktoken_files")
def test_chat_turns_fill_the_ledger_and_metrics(chat: CachingChat, serve) -> None:
    server = serve()
    client = openai_client(server, "ledger-1")
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    got: list[bytes] = []
    for turn in range(6):
        history.append({"role": "user", "content": f"question {turn}: " + "details " * 40})
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=history)
        got.append(raw.http_response.content)
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    assert got == chat.sent  # the provider's bytes, as they were

    ledger = ledger_after(server, "ledger-1", 6)
    assert ledger["requests"] == 6
    assert ledger["prompt_tokens"] == 6 * PROMPT
    assert ledger["cached_tokens"] == 6 * CACHED
    assert ledger["output_tokens"] == 6 * OUTPUT
    assert ledger["spent"] == pytest.approx(6 * CHAT_DOLLARS)
    summaries = ledger["summaries"]
    assert summaries >= 1  # priced from the summarizer's own usage, at its configured price
    assert ledger["summarizer_input_tokens"] == 300 * summaries
    assert ledger["summarizer_spent"] == pytest.approx(summaries * (300 * 1.0 + 20 * 4.0) / 1e6)
    # Compacted requests stand for a longer history than they sent.
    assert ledger["full_prompt_tokens"] > ledger["prompt_tokens"]
    assert ledger["saved"] == pytest.approx(
        ledger["counterfactual"] - ledger["spent"] - ledger["summarizer_spent"]
    )
    assert "ledger" not in admin_get(server, "/conversations/ledger-1").json()  # checkpoints only

    policy = {"policy": "default"}
    assert metric(server, "proxy_dollars_total", kind="spent", **policy) == pytest.approx(
        6 * CHAT_DOLLARS
    )
    assert metric(server, "proxy_dollars_total", kind="direct", **policy) == pytest.approx(
        ledger["counterfactual"]
    )
    assert metric(server, "proxy_dollars_total", kind="summarizer", **policy) == pytest.approx(
        ledger["summarizer_spent"]
    )
    assert metric(server, "proxy_dollars_net_saved", **policy) == pytest.approx(ledger["saved"])
    assert metric(server, "proxy_billed_prompt_tokens_total", kind="cached", **policy) == 6 * CACHED


def test_a_streamed_chat_answer_is_read_from_its_last_chunk(chat: CachingChat, serve) -> None:
    server = serve(NEVER)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {KEY}", "x-conversation-id": "streamed"}
    for _ in range(2):
        with httpx.stream(
            "POST", f"{server.url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            got = b"".join(response.iter_raw())
        assert got == chat.sent[-1]
    # The official client reads the same stream, usage chunk included.
    client = openai_client(server, "streamed")
    stream = client.chat.completions.create(**body)
    assert [c.usage.prompt_tokens_details.cached_tokens for c in stream if c.usage] == [CACHED]

    ledger = ledger_after(server, "streamed", 3)
    assert (ledger["cached_tokens"], ledger["prompt_tokens"]) == (3 * CACHED, 3 * PROMPT)
    assert ledger["spent"] == pytest.approx(3 * CHAT_DOLLARS)
    assert ledger["counterfactual"] == pytest.approx(ledger["spent"])  # nothing compacted


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_cache_reads_and_writes_are_priced(
    second_mock: MockUpstream, serve, stream: bool
) -> None:
    second_mock.default = claude_reply
    server = serve(NEVER)
    key = "sk-ant-ledger"
    client = closed_after_test(
        anthropic.Anthropic(
            base_url=server.url,
            api_key=key,
            max_retries=0,
            default_headers={"X-Conversation-Id": "claude"},
        )
    )
    messages = [{"role": "user", "content": "hello"}]
    for _ in range(2):
        if stream:
            with client.messages.stream(model=CLAUDE, max_tokens=64, messages=messages) as s:
                final = s.get_final_message()
        else:
            final = client.messages.create(model=CLAUDE, max_tokens=64, messages=messages)
        assert final.usage.cache_read_input_tokens == 1800
    ledger = ledger_after(server, "claude", 2, key=key)
    assert ledger["cached_tokens"] == 2 * 1800
    assert ledger["cache_write_tokens"] == 2 * 100
    assert ledger["prompt_tokens"] == 2 * 2000
    assert ledger["output_tokens"] == 2 * 40
    assert ledger["spent"] == pytest.approx(2 * CLAUDE_DOLLARS)
    assert (
        metric(server, "proxy_billed_prompt_tokens_total", kind="cache_write", policy="default")
        == 2 * 100
    )


class DownBackend(MemoryBackend):
    """A store that answers nothing."""

    name = "down"

    async def get(self, key: str, **kwargs: Any) -> bytes | None:
        raise StoreError("connection refused")

    async def compare_and_set(self, *args: Any, **kwargs: Any) -> bool:
        raise StoreError("connection refused")

    async def acquire(self, *args: Any, **kwargs: Any) -> bool:
        raise StoreError("connection refused")


@pytest.mark.parametrize("fallback", [False, True])
def test_a_failing_store_leaves_requests_answered(chat: CachingChat, serve, fallback: bool) -> None:
    settings = store_settings("redis://unused")
    store = Store(
        DownBackend(),
        settings=settings,
        tenancy=Tenancy.from_settings(settings),
        fallback=MemoryBackend() if fallback else None,
    )
    server = serve(NEVER, store=store)
    client = openai_client(server, "no-store")
    for turn in range(3):
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"question {turn}"}]
        )
        assert answer.usage.prompt_tokens_details.cached_tokens == CACHED
    # The dollars are still counted, though no ledger could be kept (or only in-process).
    deadline = time.monotonic() + 10
    while (
        metric(server, "proxy_dollars_total", kind="spent", policy="default")
        < 3 * CHAT_DOLLARS * 0.999
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_merged_pricing_is_a_config_section() -> None:
    settings = summarizing("http://127.0.0.1:1", pricing=merged(PRICING))
    assert settings.pricing.models["ledger-model*"].cached_input == 0.5


@pytest.mark.usefixtures("tiktoken_files")
def test_a_policy_can_show_the_ledger_on_every_answer(chat: CachingChat, serve) -> None:
    """``ledger_header``: each answer carries the conversation's dollars up to the answer
    before it (an answer's own usage is known only at its end); off by default."""
    server = serve({**EVERY_THREE_INTERACTIONS, "ledger_header": True})
    client = openai_client(server, "ledger-header")
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    seen = []
    for turn in range(4):
        history.append({"role": "user", "content": f"question {turn}: " + "details " * 40})
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=history)
        seen.append(raw.headers.get("x-compaction-ledger"))
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
        ledger_after(server, "ledger-header", turn + 1)

    fields = [dict(part.split("=") for part in value.split("; ")) for value in seen]
    assert [int(f["requests"]) for f in fields] == [0, 1, 2, 3]
    for turn, found in enumerate(fields):
        assert float(found["spent"]) == pytest.approx(turn * CHAT_DOLLARS, abs=1e-6)
    assert all(float(f["summarizer"]) >= 0 for f in fields)

    plain = serve()
    raw = openai_client(plain, "no-header").chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}]
    )
    assert "x-compaction-ledger" not in raw.headers
