"""Compaction end to end: the official openai client, a real proxy, a real mock provider that
also writes the summaries, and both store backends (a private redis-server for redis://)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.support.clients import KEY, admin_get, openai_client
from tests.support.config import EVERY_SIX_INTERACTIONS, config, summarizing
from tests.support.provider import SUMMARIZER_MODEL, SYSTEM, Provider, check_sent, take_turn
from tests.support.redis_server import own_redis_server
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle


def test_forty_turns_with_tools_inline(
    mock, provider: Provider, start_proxy, store_url: str
) -> None:
    server = start_proxy(summarizing(mock.url, store_url))
    client = openai_client(server)
    history = [SYSTEM]
    outcomes = []
    for turn in range(40):
        before = len(mock.received)
        text = f"Step {turn}: update src/module_{turn}.py" + (" TOOL" if turn % 3 == 0 else "")
        headers = take_turn(client, history, text)
        outcomes += [h["x-compaction"] for h in headers]
        for request in mock.received[before:]:
            body = request.json()
            if body["model"] != SUMMARIZER_MODEL:
                check_sent(body["messages"], history)

    assert "applied" in outcomes and "failed" not in outcomes
    last = provider.chat_requests()[-1]["messages"]
    assert len(last) < len(history) / 4
    assert last[1]["content"].startswith("<agent_summary>")
    # Running summary: every summarizer call after the first extends the previous summary.
    summary_calls = provider.summary_requests()
    assert len(summary_calls) == provider.summaries >= 5
    for n, call in enumerate(summary_calls[1:], start=1):
        assert f"SUMMARY-{n}" in json.dumps(call["messages"])
    # What the store holds: one checkpoint per summarizer call, each covering more.
    record = admin_get(server, "/conversations/conv-1").json()
    covered = [c["covered_messages"] for c in record["checkpoints"]]
    assert len(covered) == provider.summaries
    assert covered == sorted(covered, reverse=True)
    assert record["checkpoints"][0]["summary"] in last[1]["content"]


def test_ahead_mode_summarizes_after_the_response(mock, provider: Provider, start_proxy) -> None:
    server = start_proxy(summarizing(mock.url, mode="ahead"))
    client = openai_client(server)
    history = [SYSTEM]
    outcomes = []
    for turn in range(20):
        outcomes += [h["x-compaction"] for h in take_turn(client, history, f"Step {turn}")]
        time.sleep(0.05)  # the background summary runs between turns, as in real use
        check_sent(provider.chat_requests()[-1]["messages"], history)
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'proxy_summarizer_calls_total{mode="ahead",outcome="ok"}' in metrics
    assert 'mode="inline"' not in metrics  # never on the request path
    assert outcomes[:5] == ["skipped"] * 5
    assert outcomes[-5:] == ["applied"] * 5
    assert provider.summaries >= 2


def test_ahead_work_survives_a_client_that_stops_reading_at_done(
    mock, provider: Provider, start_proxy
) -> None:
    """openai-python stops reading a stream at ``data: [DONE]`` and closes the connection. A
    provider that ends its body a moment after that event must not cost the turn its
    after-response work (the ahead-of-time summary), or the conversation is never compacted."""

    def answer(request):
        reply = provider(request)
        if request.body and json.loads(request.body).get("stream"):
            reply.chunks = [*reply.chunks, 0.3]  # the body ends 0.3 s after [DONE]
        return reply

    mock.default = answer
    server = start_proxy(summarizing(mock.url, mode="ahead"))
    client = openai_client(server)
    history = [SYSTEM]
    for turn in range(12):
        history.append({"role": "user", "content": f"Step {turn}"})
        stream = client.chat.completions.create(model="gpt-4o", messages=history, stream=True)
        with stream:
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        history.append({"role": "assistant", "content": text})
        settle(server.url, route="chat", answered=turn + 1)
    assert provider.summaries >= 1
    assert provider.chat_requests()[-1]["messages"][1]["content"].startswith("<agent_summary>")


def test_edited_history_never_gets_a_summary_of_what_it_does_not_have(
    mock, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url))
    client = openai_client(server)
    history = [SYSTEM]
    for turn in range(9):
        # turns longer than a summary, so the summary is worth applying
        take_turn(client, history, f"Step {turn}: secret-{turn}. " + "Be thorough. " * 12)
    assert provider.summaries == 1
    old_summary = provider.chat_requests()[-1]["messages"][1]["content"]
    assert "SUMMARY-1" in old_summary

    edited = json.loads(json.dumps(history))
    edited[1]["content"] = "Step 0, but different"
    take_turn(client, edited, "continue the edited branch")
    sent = provider.chat_requests()[-1]["messages"]
    assert "SUMMARY-1" not in json.dumps(sent)
    check_sent(sent, edited)

    # A fork that keeps the summarized prefix reuses the checkpoint.
    fork = json.loads(json.dumps(history))
    take_turn(client, fork, "a different next step")
    assert "SUMMARY-1" in json.dumps(provider.chat_requests()[-1]["messages"])


def test_two_proxies_on_one_redis_make_one_summary(
    mock, provider: Provider, start_proxy, redis_url
) -> None:
    provider.summary_delay = 0.8
    with __import__("redis").Redis.from_url(redis_url) as client:
        client.flushdb()
    first = start_proxy(summarizing(mock.url, redis_url))
    second = start_proxy(summarizing(mock.url, redis_url))
    history = [SYSTEM]
    for turn in range(6):
        take_turn(openai_client(first, "shared"), history, f"Step {turn}")
    history.append({"role": "user", "content": "Step 6"})
    history.append({"role": "assistant", "content": "ok"})
    history.append({"role": "user", "content": "Step 7"})
    results: dict[str, Any] = {}

    def call(name: str, server: ThreadedUvicorn) -> None:
        raw = openai_client(server, "shared").chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history
        )
        results[name] = raw.headers

    threads = [threading.Thread(target=call, args=(n, s)) for n, s in (("a", first), ("b", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert provider.summaries == 1
    assert results["a"]["x-compaction"] == results["b"]["x-compaction"] == "applied"
    assert results["a"]["x-compaction-checkpoint"] == results["b"]["x-compaction-checkpoint"] != ""


def test_redis_down_mid_conversation_keeps_serving(mock, provider: Provider, start_proxy) -> None:
    with own_redis_server() as redis:
        server = start_proxy(summarizing(mock.url, redis.url))
        client = openai_client(server)
        history = [SYSTEM]
        for turn in range(4):
            take_turn(client, history, f"Step {turn}")
        redis.kill()  # a crash: connections reset, nothing answers
        for turn in range(4, 12):
            headers = take_turn(client, history, f"Step {turn}")
            assert headers[-1]["x-compaction"] in ("applied", "skipped")
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 200
        assert ready.json()["store"]["state"] == "degraded"
        errors = _metric(httpx.get(f"{server.url}/metrics").text, "proxy_store_errors_total")
        assert errors > 0

        redis.start()  # back on the same port, empty
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            take_turn(client, history, "after the outage")
            if httpx.get(f"{server.url}/readyz").json()["store"]["state"] == "ok":
                break
            time.sleep(0.3)
        assert httpx.get(f"{server.url}/readyz").json()["store"]["state"] == "ok"


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_summarizer_failure_fails_open(mock, provider: Provider, start_proxy) -> None:
    provider.fail_summaries = True
    server = start_proxy(summarizing(mock.url))
    client = openai_client(server)
    history = [SYSTEM]
    outcomes = []
    for turn in range(9):
        outcomes += [h["x-compaction"] for h in take_turn(client, history, f"Step {turn}")]
    assert outcomes[-1] == "failed"
    assert provider.chat_requests()[-1]["messages"] == history[:-1]  # the original, whole
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'proxy_summarizer_calls_total{mode="inline",outcome="error"}' in metrics


def near_a_refusal(mock, provider: Provider, start_proxy) -> tuple[ThreadedUvicorn, list]:
    """A proxy whose trigger never fires (only the overflow rescue compacts), five turns, then a
    provider that refuses more than 8 messages, and a new user turn."""
    never = {**EVERY_SIX_INTERACTIONS, "trigger": {"interactions": 100, "context_fraction": 0}}
    server = start_proxy(summarizing(mock.url, policy=never))
    history = [SYSTEM]
    for turn in range(5):
        take_turn(openai_client(server), history, f"Step {turn}")
    provider.max_messages = 8
    history.append({"role": "user", "content": "one more"})
    return server, history


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_rescued_once(
    mock, provider: Provider, start_proxy, stream: bool
) -> None:
    server, history = near_a_refusal(mock, provider, start_proxy)
    raw = openai_client(server).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=stream
    )
    if stream:
        text_out = "".join(c.choices[0].delta.content or "" for c in raw.parse())
    else:
        text_out = raw.parse().choices[0].message.content
    assert text_out.startswith("done")
    assert raw.headers["x-compaction-retried"] == "context_length_exceeded"
    first, second = provider.chat_requests()[-2:]
    assert len(first["messages"]) == len(history)
    assert len(second["messages"]) <= 8
    check_sent(second["messages"], history)
    assert provider.summaries == 1


def test_empty_streamed_overflow_answer_is_rescued(mock, provider: Provider, start_proxy) -> None:
    server, history = near_a_refusal(mock, provider, start_proxy)
    provider.empty_stream_on_overflow = True
    stream = openai_client(server).chat.completions.create(
        model="gpt-4o", messages=history, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream).startswith("done")


def test_no_retry_for_other_errors(mock, provider: Provider, start_proxy) -> None:
    from tests.support.mock_upstream import json_reply

    server = start_proxy(summarizing(mock.url))
    mock.push(
        json_reply(
            {"error": {"message": "bad tool schema", "type": "invalid_request_error"}}, status=400
        )
    )
    with pytest.raises(openai.BadRequestError):
        openai_client(server).chat.completions.create(
            model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "x"}]
        )
    assert len(provider.chat_requests()) == 1


def test_headers_on_streaming_and_plain_responses(mock, provider: Provider, start_proxy) -> None:
    server = start_proxy(summarizing(mock.url))
    history = [SYSTEM]
    for turn in range(8):
        take_turn(openai_client(server), history, f"Step {turn}")
    history.append({"role": "user", "content": "stream it"})
    raw = openai_client(server).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=True
    )
    "".join(c.choices[0].delta.content or "" for c in raw.parse())
    assert raw.headers["x-compaction"] == "applied"
    assert int(raw.headers["x-compaction-tokens-after"]) < int(
        raw.headers["x-compaction-tokens-before"]
    )
    assert raw.headers["x-compaction-checkpoint"]
    assert raw.headers["x-compaction-policy"] == "default"


def test_off_switches_forward_byte_identical(mock, provider: Provider, start_proxy) -> None:
    server = start_proxy(summarizing(mock.url, policies={"frozen": {"strategy": "off"}}))
    history = [SYSTEM]
    for turn in range(9):
        history += [{"role": "user", "content": f"u{turn}"}, {"role": "assistant", "content": "a"}]
    history.append({"role": "user", "content": "last"})
    body = json.dumps({"model": "gpt-4o", "messages": history}, indent=1).encode()
    for headers in ({"x-compaction": "off"}, {"x-compaction-policy": "frozen"}, {}):
        response = httpx.post(
            f"{server.url}/v1/chat/completions",
            content=body,
            headers={"x-conversation-id": "c-off", **headers} if headers else {},
        )
        assert response.status_code == 200
        assert response.headers["x-compaction"] == "off"
        assert mock.received[-1].body == body
    assert provider.summaries == 0


@pytest.mark.parametrize(
    ("headers", "body", "fragment"),
    [
        ({"x-conversation-id": "bad id with spaces"}, None, "X-Conversation-Id"),
        ({"x-conversation-id": "c", "x-compaction-policy": "nope"}, None, "X-Compaction-Policy"),
        ({"x-conversation-id": "c"}, [{"role": "user", "content": 5}], "messages[0].content"),
        (
            {"x-conversation-id": "c"},
            [{"role": "tool", "content": "x"}],
            "messages[0].tool_call_id",
        ),
    ],
)
def test_bad_input_is_400_and_stores_nothing(
    mock, provider, start_proxy, headers, body, fragment
) -> None:
    server = start_proxy(summarizing(mock.url))
    messages = body or [{"role": "user", "content": "hi"}]
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": messages},
        headers={"authorization": f"Bearer {KEY}", **headers},
    )
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"] + str(response.json()["error"]["param"])
    assert mock.received == []
    assert admin_get(server, "/conversations/c").status_code == 404


def test_admin_api(mock, provider: Provider, start_proxy) -> None:
    server = start_proxy(summarizing(mock.url))
    history = [SYSTEM]
    for turn in range(9):
        take_turn(openai_client(server, "conv-a"), history, f"Step {turn}")

    shown = admin_get(server, "/conversations/conv-a")
    assert shown.status_code == 200
    checkpoint = shown.json()["checkpoints"][0]
    assert "SUMMARY-1" in checkpoint["summary"]
    assert checkpoint["dropped_messages"] > 0
    one = admin_get(server, f"/conversations/conv-a/checkpoints/{checkpoint['id']}")
    assert one.json()["id"] == checkpoint["id"]

    # Another caller's credential is another tenant: it sees nothing.
    assert admin_get(server, "/conversations/conv-a", key="sk-someone-else").status_code == 404
    # Auth failures.
    assert httpx.get(f"{server.url}/admin/conversations/conv-a").status_code == 401
    wrong = httpx.get(
        f"{server.url}/admin/conversations/conv-a",
        headers={"authorization": "Bearer nope", "x-caller-authorization": f"Bearer {KEY}"},
    )
    assert wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"

    preview = admin_get(
        server, "/preview", method="POST", json={"model": "gpt-4o", "messages": history}
    )
    assert preview.status_code == 200
    assert preview.json()["fired"] == ["interactions"]
    assert preview.json()["interactions"][0]["tokens"] > 0

    forced = admin_get(
        server,
        "/conversations/conv-a/compact",
        method="POST",
        json={"model": "gpt-4o", "messages": history},
    )
    assert forced.status_code == 200
    assert forced.json()["checkpoint"]["covered_messages"] > checkpoint["covered_messages"]
    assert provider.summaries == 2

    assert admin_get(server, "/conversations/conv-a", method="DELETE").json() == {"deleted": True}
    assert admin_get(server, "/conversations/conv-a").status_code == 404


def test_admin_names_an_unknown_policy_in_a_400_and_stores_nothing(
    mock, provider: Provider, start_proxy
) -> None:
    server = start_proxy(summarizing(mock.url))
    history = [SYSTEM, {"role": "user", "content": "Step 0"}]
    for path in ("/preview", "/conversations/conv-b/compact"):
        refused = admin_get(
            server,
            path,
            method="POST",
            json={"model": "gpt-4o", "messages": history, "policy": "no-such-policy"},
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "unknown_policy"
        assert refused.json()["error"]["param"] == "policy"
    assert provider.summaries == 0
    assert admin_get(server, "/conversations/conv-b").status_code == 404


def test_admin_api_is_absent_without_a_token(mock, start_proxy) -> None:
    server = start_proxy(config(provider=mock.url))
    response = httpx.get(
        f"{server.url}/admin/conversations/x", headers={"authorization": "Bearer x"}
    )
    assert response.status_code == 404


def test_tenants_do_not_share_conversations(mock, provider: Provider, start_proxy) -> None:
    server = start_proxy(summarizing(mock.url))
    history = [SYSTEM]
    for turn in range(9):
        take_turn(openai_client(server, "same-id"), history, f"Step {turn}")
    assert provider.summaries == 1
    # The same conversation id and history under another key: no summary of the first tenant's.
    other = json.loads(json.dumps(history[:-1]))
    other.append({"role": "user", "content": "Step 9"})
    openai_client(server, "same-id", key="sk-caller-two").chat.completions.create(
        model="gpt-4o", messages=other
    )
    assert provider.summaries == 2
    assert "SUMMARY-1" not in json.dumps(provider.chat_requests()[-1]["messages"])


@pytest.mark.parametrize("mode", ["inline", "ahead"])
def test_a_summary_caused_by_a_tool_trigger_stays_applied(
    mock, provider: Provider, start_proxy, mode: str
) -> None:
    on_tool = {
        **EVERY_SIX_INTERACTIONS,
        # pays off: the tool trigger alone decides (under pays it summarizes when that pays).
        "trigger": {"context_fraction": 0, "on_tool_success": ["read_file"], "pays": False},
    }
    server = start_proxy(summarizing(mock.url, policy=on_tool, mode=mode))
    client = openai_client(server)
    history = [SYSTEM]
    for turn in range(4):  # turns longer than a summary, so the summary is worth applying
        take_turn(client, history, f"Step {turn}: " + "be thorough " * 20)
    assert provider.summaries == 0
    tool_turn = take_turn(client, history, "Step 4 TOOL")
    # read_file succeeded: inline compacts this very request; ahead answers it as it is and
    # summarizes right after (the compaction is due: pending, not skipped).
    assert tool_turn[-1]["x-compaction"] == ("applied" if mode == "inline" else "pending")
    time.sleep(0.3)
    assert provider.summaries == 1
    after = take_turn(client, history, "Step 5, no tools")
    later = take_turn(client, history, "Step 6, no tools")
    # The trigger does not fire on these requests, but the conversation stays compacted.
    assert after[-1]["x-compaction"] == later[-1]["x-compaction"] == "applied"
    assert after[-1]["x-compaction-checkpoint"] == later[-1]["x-compaction-checkpoint"] != ""
    assert provider.summaries == 1


def test_a_message_accepted_before_does_not_vouch_for_a_lookalike(
    mock, provider: Provider, start_proxy
) -> None:
    """The per-message cache remembers what passed validation: by exact content, so the
    same message with a null ``name`` (what Python's None also stands for) is still refused."""
    server = start_proxy(summarizing(mock.url))
    headers = {"authorization": f"Bearer {KEY}", "x-conversation-id": "lookalike"}
    url = f"{server.url}/v1/chat/completions"
    accepted = [{"role": "user", "content": "hi"}]
    first = httpx.post(url, json={"model": "gpt-4o", "messages": accepted}, headers=headers)
    assert first.status_code == 200
    lookalike = [{"role": "user", "content": "hi", "name": None}]
    response = httpx.post(url, json={"model": "gpt-4o", "messages": lookalike}, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].name"
    assert len(mock.received) == 1
