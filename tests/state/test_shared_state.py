"""State shared through Redis without a configured tenant secret, Redis outages at start-up and
after, and what Redis holds. A private redis-server per test; never the one on 6379."""

from __future__ import annotations

import time

import httpx
import pytest
import redis

from proxy.config.settings import Settings
from tests.support.clients import KEY, admin_get, openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider, take_turn
from tests.support.redis_server import RedisServer
from tests.support.servers import ThreadedUvicorn, free_port

SECRET_KEY = b"cproxy:tenant-secret"


def without_secret(provider: str, store_url: str, **store: object) -> Settings:
    # No tenant_secret: the point of these tests.
    store = {"tenant_secret": None, "breaker_cooldown_seconds": 0.2, **store}
    return summarizing(provider, store_url, store=store)


def wait_for_state(server: ThreadedUvicorn, state: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 200
        if ready.json()["store"]["state"] == state or time.monotonic() > deadline:
            return ready.json()
        time.sleep(0.1)


def test_two_replicas_without_a_tenant_secret_share_one_summary(
    mock, start_proxy, redis_server: RedisServer
) -> None:
    provider = Provider(mock)
    replicas = [start_proxy(without_secret(mock.url, redis_server.url)) for _ in range(2)]
    history = [SYSTEM]
    outcomes = []
    for turn in range(9):
        headers = take_turn(openai_client(replicas[turn % 2]), history, f"Step {turn}")
        outcomes.append((headers[-1]["x-compaction"], headers[-1]["x-compaction-checkpoint"]))
    assert provider.summaries == 1, outcomes
    applied = [checkpoint for outcome, checkpoint in outcomes if outcome == "applied"]
    assert len(applied) >= 2 and len(set(applied)) == 1  # both replicas apply the same one
    with redis.Redis.from_url(redis_server.url) as raw:
        assert raw.ttl(SECRET_KEY) == -1  # created once, never expires

    # A restarted proxy reads the same secret: it finds the checkpoint, no new summary.
    for server in replicas:
        server.__exit__(None, None, None)
    restarted = start_proxy(without_secret(mock.url, redis_server.url))
    headers = take_turn(openai_client(restarted), history, "after the restart")
    assert headers[-1]["x-compaction"] == "applied"
    assert headers[-1]["x-compaction-checkpoint"] == applied[-1]
    assert provider.summaries == 1


def test_redis_down_at_start_up_serves_then_adopts_the_shared_secret(
    mock, start_proxy, redis_server: RedisServer
) -> None:
    provider = Provider(mock)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    early = start_proxy(without_secret(mock.url, url))  # nothing listens there yet
    history = [SYSTEM]
    for turn in range(9):
        assert take_turn(openai_client(early), history, f"Step {turn}")[-1]["x-compaction"] in (
            "applied",
            "skipped",
        )
    ready = httpx.get(f"{early.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["store"]["state"] == "degraded"
    assert "tenant secret" in ready.json()["store"]["reason"]
    assert provider.summaries == 1  # in-process state served the conversation meanwhile

    with RedisServer(port=port):
        # No traffic: the background probe notices Redis and loads the shared secret.
        assert wait_for_state(early, "ok")["store"]["state"] == "ok"
        late = start_proxy(without_secret(mock.url, url))
        history.append({"role": "user", "content": "Step 9"})
        openai_client(early).chat.completions.create(model="gpt-4o", messages=history)
        before = provider.summaries
        headers = take_turn(openai_client(late), history, "Step 10")
        # The early proxy's summary after recovery is in Redis under the shared secret.
        assert headers[-1]["x-compaction"] == "applied"
        assert provider.summaries == before


def test_readyz_recovers_without_traffic(mock, start_proxy, redis_server: RedisServer) -> None:
    Provider(mock)
    server = start_proxy(without_secret(mock.url, redis_server.url))
    history = [SYSTEM]
    take_turn(openai_client(server), history, "Step 0")
    redis_server.kill()
    take_turn(openai_client(server), history, "Step 1")
    assert httpx.get(f"{server.url}/readyz").json()["store"]["state"] == "degraded"
    redis_server.start()
    assert wait_for_state(server, "ok")["store"]["state"] == "ok"


@pytest.mark.parametrize("sealed", [False, True])
def test_redis_holds_no_raw_conversation_id(
    mock, start_proxy, redis_server: RedisServer, sealed: bool
) -> None:
    Provider(mock)
    keys = ["k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="] if sealed else []
    server = start_proxy(without_secret(mock.url, redis_server.url, encryption_keys=keys))
    conversation = "ticket-4711-customer-acme"
    history = [SYSTEM]
    for turn in range(9):
        take_turn(openai_client(server, conversation), history, f"Step {turn}")
    with redis.Redis.from_url(redis_server.url) as raw:
        stored = {key: raw.get(key) for key in raw.scan_iter() if raw.type(key) == b"string"}
    records = [value for key, value in stored.items() if key.startswith(b"cproxy:r:")]
    assert records
    for key, value in stored.items():
        assert conversation.encode() not in key
        assert conversation.encode() not in value
    if sealed:
        assert not stored[SECRET_KEY].isascii()  # the secret itself is sealed at rest
    # The admin API still names the conversation.
    shown = admin_get(server, f"/conversations/{conversation}")
    assert shown.status_code == 200
    assert shown.json()["conversation_id"] == conversation
    assert KEY


def test_replicas_agree_again_after_redis_restarts_empty(
    mock, start_proxy, redis_server: RedisServer
) -> None:
    provider = Provider(mock)
    running = start_proxy(without_secret(mock.url, redis_server.url))
    take_turn(openai_client(running), [SYSTEM], "Step 0")
    redis_server.kill()
    redis_server.start()  # no persistence: the secret is gone with everything else
    deadline = time.monotonic() + 10
    with redis.Redis.from_url(redis_server.url) as raw:
        while raw.get(SECRET_KEY) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the running replica puts its secret back, without traffic
    joining = start_proxy(without_secret(mock.url, redis_server.url))
    history = [SYSTEM]
    for turn in range(9):
        take_turn(openai_client([running, joining][turn % 2]), history, f"Step {turn}")
    assert provider.summaries == 1
