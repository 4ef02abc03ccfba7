"""Summary export through the real proxy: every new summary reaches a JSONL file, a
Redis Stream (a private redis-server) or a webhook (a real local receiver), with its tenant and
conversation; the webhook is signed, retried with backoff, and never holds up a request."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from prometheus_client import CollectorRegistry

from proxy.config.settings import Settings
from proxy.core.checkpoints import Checkpoint
from proxy.events import Listeners
from proxy.ops.export.exporter import Exporter, SummaryEvent, export_events
from tests.ops.webhook_receiver import Receiver, signed_by
from tests.support.clients import admin_view, openai_client
from tests.support.config import COMPACTING, EVERY_THREE_INTERACTIONS, config
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider, talk
from tests.support.redis_server import RedisServer, skip_without_redis
from tests.support.servers import ThreadedUvicorn, free_port

KEY = "sk-export-caller"
SECRET = "webhook-secret-for-tests"
T = TypeVar("T")


def exporting(provider: str, export: dict[str, Any]) -> Settings:
    """A summary every three interactions, exported as ``export`` says."""
    policies = {"default": EVERY_THREE_INTERACTIONS}
    return config(COMPACTING, provider=provider, policies=policies, export=export)


def webhook(url: str, **options: Any) -> dict[str, Any]:
    hook = {"url": f"{url}/hook", "secret": SECRET, "backoff_seconds": 0.02}
    return {"webhook": {**hook, "max_backoff_seconds": 0.1, **options}}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    with ThreadedUvicorn(found.app()) as server:
        found.url = server.url  # type: ignore[attr-defined]
        yield found


def stored(server: ThreadedUvicorn, conversation: str) -> dict[str, Any]:
    return admin_view(server, conversation, key=KEY)


def eventually(read: Callable[[], T], done: Callable[[T], bool]) -> T:
    """``read()`` once ``done`` holds for it: export runs after the response (bounded poll)."""
    for _ in range(400):
        value = read()
        if done(value):
            return value
        time.sleep(0.025)
    raise AssertionError(f"never reached: {value!r}")


def metric(server: ThreadedUvicorn, sink: str, outcome: str) -> float:
    prefix = f'proxy_export_events_total{{outcome="{outcome}",sink="{sink}"}} '
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def check_events(events: list[dict[str, Any]], shown: dict[str, Any], conversation: str) -> None:
    """Each exported event is a stored checkpoint, with the tenant the admin API shows."""
    by_id = {c["id"]: c for c in shown["checkpoints"]}
    assert sorted(e["checkpoint_id"] for e in events) == sorted(by_id)
    for event in events:
        checkpoint = by_id[event["checkpoint_id"]]
        assert event["type"] == "summary.created"
        assert event["tenant"] == shown["tenant"]
        assert event["conversation_id"] == conversation
        assert event["policy"] == "default"
        for key in ("parent_id", "covered_messages", "summary_tokens", "created_at", "summary"):
            assert event[key] == checkpoint[key], key


def test_every_summary_is_appended_to_the_jsonl_file(
    mock: MockUpstream, provider: Provider, start_proxy, tmp_path: Path
) -> None:
    path = tmp_path / "summaries.jsonl"
    server = start_proxy(exporting(mock.url, {"jsonl": {"path": str(path)}}))
    talk(openai_client(server, "conv-jsonl", key=KEY), 8)
    shown = stored(server, "conv-jsonl")
    assert len(shown["checkpoints"]) >= 2

    def read() -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    events = eventually(read, lambda found: len(found) == len(shown["checkpoints"]))
    check_events(events, shown, "conv-jsonl")
    assert metric(server, "jsonl", "sent") == len(events)


def test_every_summary_is_added_to_a_bounded_redis_stream(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    skip_without_redis()
    import redis

    # Small stream nodes, so that MAXLEN ~ trims as soon as the stream passes maxlen.
    with RedisServer("--stream-node-max-entries", "1") as redis_server:
        stream = {"url": redis_server.url, "stream": "kb", "maxlen": 2}
        server = start_proxy(exporting(mock.url, {"redis_stream": stream}))
        talk(openai_client(server, "conv-stream", key=KEY), 10)
        shown = stored(server, "conv-stream")
        made = len(shown["checkpoints"])
        assert made >= 3
        eventually(lambda: metric(server, "redis_stream", "sent"), lambda sent: sent == made)
        with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
            entries = client.xrange("kb")
    assert len(entries) == 2  # the newest two: the stream stays bounded
    events = [
        {**fields, "covered_messages": int(fields["covered_messages"])} for _, fields in entries
    ]
    newest = {c["id"]: c for c in shown["checkpoints"][:2]}
    assert {e["checkpoint_id"] for e in events} == set(newest)
    for event in events:
        assert event["tenant"] == shown["tenant"]
        assert event["conversation_id"] == "conv-stream"
        assert event["summary"] == newest[event["checkpoint_id"]]["summary"]
        assert event["covered_messages"] == newest[event["checkpoint_id"]]["covered_messages"]


def test_webhook_posts_signed_summaries_and_retries_a_failing_receiver(
    mock: MockUpstream, provider: Provider, start_proxy, receiver: Receiver
) -> None:
    receiver.fail_first = 2  # 503, 503, then 204
    url = receiver.url  # type: ignore[attr-defined]
    server = start_proxy(exporting(mock.url, webhook(url)))
    talk(openai_client(server, "conv-hook", key=KEY), 8)
    shown = stored(server, "conv-hook")
    made = len(shown["checkpoints"])
    eventually(lambda: metric(server, "webhook", "sent"), lambda sent: sent == made)

    posts = receiver.snapshot()
    assert len(posts) == made + 2  # the first summary took three tries
    assert posts[0] == posts[1] == posts[2]  # the same bytes, the same signature, each time
    for headers, body in posts:
        assert headers["content-type"] == "application/json"
        assert signed_by(SECRET, body, headers["x-compaction-signature"])
        assert not signed_by("another-secret", body, headers["x-compaction-signature"])
        assert headers["x-compaction-delivery"] == json.loads(body)["checkpoint_id"]
    check_events([json.loads(body) for _, body in posts[2:]], shown, "conv-hook")
    assert metric(server, "webhook", "failed") == 0


def test_webhook_retries_until_the_receiver_is_up(
    mock: MockUpstream, provider: Provider, start_proxy
) -> None:
    port = free_port()  # nothing listens there yet: connection refused
    export = webhook(f"http://127.0.0.1:{port}", max_attempts=100)
    server = start_proxy(exporting(mock.url, export))
    talk(openai_client(server, "conv-late", key=KEY), 5)
    assert metric(server, "webhook", "sent") == 0
    late = Receiver()
    with ThreadedUvicorn(late.app(), port=port):
        eventually(lambda: metric(server, "webhook", "sent"), lambda sent: sent >= 1)
    body = json.loads(late.snapshot()[0][1])
    assert body["checkpoint_id"] == stored(server, "conv-late")["checkpoints"][-1]["id"]


def test_webhook_gives_up_at_once_on_a_client_error(
    mock: MockUpstream, provider: Provider, start_proxy, receiver: Receiver
) -> None:
    receiver.fail_first, receiver.status = 1000, 400
    url = receiver.url  # type: ignore[attr-defined]
    server = start_proxy(exporting(mock.url, webhook(url)))
    talk(openai_client(server, "conv-refused", key=KEY), 5)
    eventually(lambda: metric(server, "webhook", "failed"), lambda failed: failed == 1)
    assert len(receiver.snapshot()) == 1  # a 400 is not retried


def test_a_stuck_receiver_never_holds_up_a_request(
    mock: MockUpstream, provider: Provider, start_proxy, receiver: Receiver
) -> None:
    receiver.release = threading.Event()
    url = receiver.url  # type: ignore[attr-defined]
    export = {**webhook(url, timeout_seconds=600), "queue": 1}
    server = start_proxy(exporting(mock.url, export))
    try:
        for n in range(4):  # a summary each, while the receiver holds the first POST
            talk(openai_client(server, f"conv-stuck-{n}", key=KEY), 5)
        assert len(receiver.snapshot()) == 1  # every request above was answered meanwhile
        made = sum(len(stored(server, f"conv-stuck-{n}")["checkpoints"]) for n in range(4))
        assert made >= 3
        # One summary in flight, one queued (queue: 1), the others dropped and counted.
        assert metric(server, "webhook", "dropped") == made - 2
    finally:
        receiver.release.set()
    eventually(lambda: metric(server, "webhook", "sent"), lambda sent: sent == 2)


@pytest.mark.anyio
async def test_the_exporter_publishes_the_summary_events_it_subscribed_to() -> None:
    """The exporter hears a stored summary as an event (``proxy.events``), whatever emits it:
    nothing on the request path calls it by name."""

    @dataclass(frozen=True)
    class Stored:  # an emitter's own event, with the fields the exporter reads
        tenant: str
        conversation_id: str
        policy: str
        checkpoint: Checkpoint

    class Collect:
        name = "collect"

        def __init__(self) -> None:
            self.events: list[SummaryEvent] = []

        async def deliver(self, event: SummaryEvent, body: bytes) -> None:
            self.events.append(event)

        async def aclose(self) -> None:
            return None

    sink = Collect()
    exporter = Exporter([sink], queue=4, events=export_events(CollectorRegistry()))
    listeners = Listeners()
    exporter.subscribe(listeners, Stored)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    checkpoint = Checkpoint.create(messages, covered=2, summary="S")
    listeners.emit(Stored("t1", "conv", "default", checkpoint))
    listeners.emit(object())  # not subscribed: ignored
    await exporter.join()
    assert sink.events == [SummaryEvent("t1", "conv", "default", checkpoint)]
    await exporter.aclose(grace=1)
