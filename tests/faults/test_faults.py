"""Fast fault cases, part of ``make test``: real ``compaction-proxy serve`` processes, a private
redis-server (behind tests/faults/tcp_fault.py where the network misbehaves), the scripted mock
provider, and the official openai client. docs/faults.md lists them with their figures.

Each asserts what a user or an operator notices: every request answered, /readyz honest about
the store and back to ok once Redis is, and no API key, message text or other tenant's summary
where it must not be.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from redis import Redis

from tests.faults.replicas import Replica
from tests.faults.tcp_fault import FaultProxy
from tests.support.mock_upstream import Received, Reply
from tests.support.provider import SUMMARIZER_MODEL, SYSTEM, Provider, take_turn
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

# Short store bounds so that a fault costs a test a few seconds, not minutes.
FAST_STORE = {
    "operation_timeout_seconds": 0.3,
    "breaker_failures": 2,
    "breaker_cooldown_seconds": 0.5,
}
# The longest a request may take while Redis misbehaves: a few store calls at their timeout.
ANSWER_BOUND = 5.0
RECOVERY_BOUND = 15.0


@pytest.fixture
def client_for() -> Iterator[Callable[..., openai.OpenAI]]:
    """client_for(replica, conversation, key) -> an openai client, closed after the test (an
    unclosed one leaves sockets for the garbage collector, a ResourceWarning in a later test)."""
    clients: list[openai.OpenAI] = []

    def make(replica: Replica, conversation: str, key: str = "sk-fault-tests") -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=f"{replica.url}/v1",
            api_key=key,
            max_retries=0,
            timeout=30,
            default_headers={"X-Conversation-Id": conversation},
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def timed_turns(
    client: openai.OpenAI, history: list[dict[str, Any]], label: str, n: int
) -> tuple[list[float], list[str]]:
    """``n`` user turns: how long each took and the X-Compaction of every response."""
    took, outcomes = [], []
    for i in range(n):
        started = time.monotonic()
        # Long enough turns that a summary replaces more than it costs, so it applies.
        text = f"{label} {i}: edit src/f{i}.py " + "context " * 300
        headers = take_turn(client, history, text)
        took.append(time.monotonic() - started)
        outcomes += [h["x-compaction"] for h in headers]
    return took, outcomes


def store_state(replica: Replica) -> str:
    ready = replica.readyz()
    assert ready["status"] == "ready", ready  # a store outage never makes the proxy unready
    return ready["store"]["state"]


def recover(replica: Replica, client: openai.OpenAI, history: list[dict[str, Any]]) -> float:
    """Turns until /readyz says the store is ok again; the seconds it took."""
    started = time.monotonic()
    while store_state(replica) != "ok":
        assert time.monotonic() - started < RECOVERY_BOUND, "the store never came back to ok"
        take_turn(client, history, "after the fault")
        time.sleep(0.2)
    return time.monotonic() - started


@pytest.mark.parametrize(
    ("mode", "delay", "during"),
    [
        ("blackhole", 0.0, "degraded"),
        ("reset", 0.0, "degraded"),
        ("delay", 1.0, "degraded"),  # slower than the store's operation timeout
        ("delay", 0.02, "ok"),  # a slow network within the timeout changes nothing
    ],
    ids=["blackhole", "reset", "delay-over-timeout", "delay-within-timeout"],
)
def test_redis_network_faults_answer_every_request(
    mode: str,
    delay: float,
    during: str,
    fault: FaultProxy,
    start_replica: Callable[..., Replica],
    client_for: Callable[..., openai.OpenAI],
) -> None:
    replica = start_replica(f"redis://127.0.0.1:{fault.port}/0", store=FAST_STORE)
    client = client_for(replica, f"conv-{mode}")
    history: list[dict[str, Any]] = [SYSTEM]
    _, before = timed_turns(client, history, "before", 6)
    assert "applied" in before and store_state(replica) == "ok"

    fault.set(mode, delay=delay)  # type: ignore[arg-type]
    took, outcomes = timed_turns(client, history, "during", 8)
    # Every turn was answered (take_turn raises otherwise), each within the bound.
    assert max(took) < ANSWER_BOUND, took
    assert "failed" not in outcomes
    assert store_state(replica) == during

    fault.set("pass")
    back = recover(replica, client, history)
    _, after = timed_turns(client, history, "after", 5)
    assert "applied" in after
    # Figures for docs/faults.md (shown with pytest -s).
    print(f"\n[{mode} {delay}s] slowest answer {max(took):.2f}s, store ok again {back:.1f}s later")


def test_redis_stopped_then_continued_answers_every_request(
    redis_server: RedisServer,
    start_replica: Callable[..., Replica],
    client_for: Callable[..., openai.OpenAI],
) -> None:
    replica = start_replica(redis_server.url, store=FAST_STORE)
    client = client_for(replica, "conv-sigstop")
    history: list[dict[str, Any]] = [SYSTEM]
    timed_turns(client, history, "before", 5)
    assert redis_server.pid is not None
    os.kill(redis_server.pid, signal.SIGSTOP)  # the server this test started, by its pid
    try:
        took, _ = timed_turns(client, history, "stopped", 6)
        assert max(took) < ANSWER_BOUND, took
        assert store_state(replica) == "degraded"
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)
    back = recover(replica, client, history)
    print(f"\n[SIGSTOP] slowest answer {max(took):.2f}s, store ok again {back:.1f}s after SIGCONT")


class TenantProvider(Provider):
    """The scripted provider, also remembering which caller each summary was written for."""

    def __init__(self, provider: Provider) -> None:
        super().__init__(provider.mock)
        self.summaries_for: dict[str, list[str]] = defaultdict(list)

    def __call__(self, request: Received) -> Reply:
        reply = super().__call__(request)
        if request.path.endswith("/chat/completions"):
            body = request.json()
            if body.get("model") == SUMMARIZER_MODEL and reply.status == 200:
                data = json.loads(reply.chunks[0])  # type: ignore[arg-type]
                text = data["choices"][0]["message"]["content"]
                self.summaries_for[request.headers.get("authorization", "")].append(text)
        return reply


def test_same_conversation_id_under_two_keys_shares_no_summary(
    redis_server: RedisServer,
    provider: Provider,
    start_replica: Callable[..., Replica],
    client_for: Callable[..., openai.OpenAI],
) -> None:
    tenants = TenantProvider(provider)
    replica = start_replica(redis_server.url)
    keys = ("sk-tenant-a", "sk-tenant-b")
    # The same id and the same history: only the tenant binding keeps A's summary from B.
    for key in keys:
        history: list[dict[str, Any]] = [SYSTEM]
        _, outcomes = timed_turns(client_for(replica, "conv-shared", key), history, "step", 9)
        assert "applied" in outcomes
    own = {key: tenants.summaries_for[f"Bearer {key}"] for key in keys}
    assert all(own.values()), own
    for key, other in (keys, keys[::-1]):
        prompts = [
            r.body.decode()
            for r in provider.mock.chat_requests()
            if r.headers.get("authorization") == f"Bearer {key}"
        ]
        leaked = [s for s in own[other] for p in prompts if s.split(":")[0] + ":" in p]
        assert not leaked, f"{other}'s summaries reached {key}'s provider calls: {leaked[:3]}"
        print(
            f"\n[tenants] {len(prompts)} calls of {key}, 0 of {len(own[other])} summaries of {other}"
        )


def redis_dump(url: str) -> Iterator[bytes]:
    """Every key of the private server and every value under it, whatever its type."""
    with Redis.from_url(url) as client:
        for key in client.scan_iter(count=1000):
            yield key
            kind = client.type(key)
            if kind == b"string":
                yield client.get(key) or b""
            elif kind == b"hash":
                for field, value in client.hgetall(key).items():
                    yield field
                    yield value
            elif kind == b"list":
                yield from client.lrange(key, 0, -1)
            elif kind == b"set":
                yield from client.smembers(key)
            elif kind == b"zset":
                yield from client.zrange(key, 0, -1)


def around(value: bytes, needle: bytes, width: int = 60) -> bytes:
    at = value.index(needle)
    return value[max(0, at - width) : at + len(needle) + width]


def test_canary_key_and_text_never_reach_logs_metrics_or_redis(
    redis_server: RedisServer,
    start_replica: Callable[..., Replica],
    client_for: Callable[..., openai.OpenAI],
) -> None:
    key = f"sk-canary-{uuid.uuid4().hex}"
    text = f"CANARY-{uuid.uuid4().hex}"
    # Encrypted at rest, as deploy/ configures it: a summary may quote the conversation (it is
    # made of it), so without encryption_keys its text sits in Redis by design.
    sealing = base64.b64encode(os.urandom(32)).decode()
    replica = start_replica(redis_server.url, store={"encryption_keys": [f"k1:{sealing}"]})
    client = client_for(replica, "conv-canary", key)
    history: list[dict[str, Any]] = [SYSTEM]
    outcomes = []
    for i in range(10):
        outcomes += [h["x-compaction"] for h in take_turn(client, history, f"{text} step {i}")]
    assert "applied" in outcomes  # compaction ran: summaries and checkpoints were written
    # Error paths log too: bad JSON and a wrong type, each carrying both canaries.
    for body in (f'{{"messages": [{{"content": "{text}"', '{"messages": "' + text + '"}'):
        response = httpx.post(
            f"{replica.url}/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {key}", "x-conversation-id": "conv-canary"},
            timeout=10,
        )
        assert response.status_code == 400, response.text
    metrics = replica.metrics()
    replica.stop()  # its last log lines too
    logs = replica.logs()
    stored = list(redis_dump(redis_server.url))
    assert stored, "nothing in Redis: the test would prove nothing"
    assert "proxy_" in metrics and logs
    for canary in (key, key.removeprefix("sk-"), text):
        assert canary not in logs, f"{canary} is in the logs"
        assert canary not in metrics, f"{canary} is in /metrics"
        hits = [around(value, canary.encode()) for value in stored if canary.encode() in value]
        assert not hits, f"{canary} is in Redis: {hits[:3]}"
    print(
        f"\n[canary] 0 hits in {len(logs)} log bytes, {len(metrics)} metrics bytes, {len(stored)} Redis keys+values"
    )
