"""Hostile and unusual input on the wire: every answer the proxy makes itself is JSON in
OpenAI's error shape and never a 5xx other than 502/504; whatever the provider would accept, the
proxy accepts and forwards (asserted on what the provider received)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.config import ADMIN, TENANT_SECRET, config
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn

CHAT = "/v1/chat/completions"
CONVERSATION = {"X-Conversation-Id": "conv-hostile-1", "Authorization": "Bearer sk-hostile"}
# Trim keeps only the newest interaction, so every request with a history is rewritten.
TRIM = {
    "store": {"tenant_secret": TENANT_SECRET},
    "admin": {"token": ADMIN},
    "policies": {"default": {"strategy": "trim", "keep": {"interactions": 1}}},
}


@pytest.fixture
def trim_proxy(mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]) -> ThreadedUvicorn:
    return start_proxy(config(TRIM, provider=mock.url))


def history(last: str = "and now?") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": last},
    ]


def post(proxy: ThreadedUvicorn, raw: bytes, headers: dict[str, str], path: str = CHAT):
    return httpx.post(
        proxy.url + path,
        content=raw,
        headers={"content-type": "application/json", **headers},
        timeout=30,
    )


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# --- item 1: parser limits --------------------------------------------------------------------


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_deeply_nested_json_is_a_400_not_a_500(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream, depth: int
) -> None:
    head = json.dumps({"model": "gpt-4o", "messages": history()})[:-1].encode()
    raw = head + b', "metadata": ' + nested(depth) + b"}"
    error = assert_openai_error(post(trim_proxy, raw, CONVERSATION), 400)
    assert error["code"] == "invalid_json"
    assert "nested" in error["message"]
    assert mock.chat_requests() == []


def test_deeply_nested_json_on_the_admin_api_is_a_400(trim_proxy: ThreadedUvicorn) -> None:
    raw = b'{"messages": ' + nested(5_000) + b"}"
    headers = {"Authorization": f"Bearer {ADMIN}", "X-Caller-Authorization": "Bearer sk-x"}
    error = assert_openai_error(post(trim_proxy, raw, headers, path="/admin/preview"), 400)
    assert error["code"] == "invalid_json"


def test_an_integer_of_5000_digits_is_a_400(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream
) -> None:
    head = json.dumps({"model": "gpt-4o", "messages": history()})[:-1].encode()
    raw = head + b', "max_tokens": ' + b"7" * 5_000 + b"}"
    error = assert_openai_error(post(trim_proxy, raw, CONVERSATION), 400)
    assert error["code"] == "invalid_json"
    assert mock.chat_requests() == []


def test_a_large_integer_reaches_the_provider_exactly_when_compacted(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream
) -> None:
    seed = 12345678901234567890123456789  # beyond 64 bits: must not become a float
    raw = json.dumps({"model": "gpt-4o", "messages": history(), "seed": seed}).encode()
    response = post(trim_proxy, raw, CONVERSATION)
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction"] == "applied"
    sent = mock.chat_requests()[-1].json()
    assert sent["seed"] == seed and isinstance(sent["seed"], int)


def test_a_lone_surrogate_reaches_the_provider_escaped(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream
) -> None:
    # Python's json writes "\ud800" as the six characters \ud800, as a client would send it.
    raw = json.dumps({"model": "gpt-4o", "messages": history("broken \ud800 text")}).encode()
    assert b"\\ud800" in raw
    response = post(trim_proxy, raw, CONVERSATION)
    assert response.status_code == 200, response.text
    assert response.headers["x-compaction"] == "applied"
    received = mock.chat_requests()[-1].body
    assert b"\\ud800" in received  # an escape in valid UTF-8 JSON, as the client sent it
    sent = json.loads(received)
    assert sent["messages"][-1] == {"role": "user", "content": "broken \ud800 text"}
    assert len(sent["messages"]) == 2  # compacted: the preamble and the newest interaction


# --- item 2: what the spec allows, compaction accepts --------------------------------------------


def test_empty_ids_and_names_pass_as_they_do_without_a_conversation(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream
) -> None:
    call = {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    calling = {"role": "assistant", "content": None, "tool_calls": [call]}
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        calling,
        {"role": "tool", "tool_call_id": "", "content": "result"},
        {"role": "assistant", "content": None, "function_call": {"name": "g", "arguments": "{}"}},
        {"role": "function", "name": "", "content": "legacy result"},
        {"role": "user", "content": "second"},
        calling,
        {"role": "tool", "tool_call_id": "", "content": "result 2"},
    ]
    raw = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    response = post(trim_proxy, raw, CONVERSATION)
    assert response.status_code == 200, response.text
    sent = mock.chat_requests()[-1].json()["messages"]
    # The newest interaction went out whole: the tool call with its (empty-id) answer.
    assert sent == [messages[0], *messages[6:]]


# --- item 3: every answer of the catch-all is JSON -------------------------------------------------


def test_a_base_url_without_v1_is_told_so_in_json(proxy: ThreadedUvicorn) -> None:
    response = httpx.post(proxy.url + "/chat/completions", json={"model": "m", "messages": []})
    error = assert_openai_error(response, 404)
    assert "/v1" in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nowhere", 404),
        ("PUT", "/healthz", 405),
        ("POST", "/metrics", 405),
        ("GET", "/v1/chat/completions", None),  # passed through: the provider answers
        ("DELETE", "/completions", 404),
    ],
)
def test_every_method_and_path_answers_json(
    proxy: ThreadedUvicorn, method: str, path: str, status: int | None
) -> None:
    response = httpx.request(method, proxy.url + path)
    if status is None:
        assert response.status_code == 200
        return
    assert_openai_error(response, status)


# --- item 4: big legal input (other clients' latency meanwhile: the fault campaign) ---------------


def test_more_messages_than_server_max_messages_is_a_413(
    mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    server = start_proxy(config(TRIM, provider=mock.url, server={"max_messages": 10}))
    messages = [{"role": "user", "content": f"m{i}"} for i in range(11)]
    raw = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    error = assert_openai_error(post(server, raw, CONVERSATION), 413)
    assert error["code"] == "too_many_messages" and "server.max_messages" in error["message"]
    assert mock.chat_requests() == []
    # Without compaction the proxy does not look inside: the provider decides.
    assert post(server, raw, {}).status_code == 200
    assert len(mock.chat_requests()) == 1


def test_a_huge_request_is_forwarded_whole_and_sized(
    trim_proxy: ThreadedUvicorn, mock: MockUpstream
) -> None:
    """A multi-megabyte message is parsed, planned and encoded off the event loop: the provider
    gets it whole, with its length. That other clients are not held up meanwhile is a latency
    figure, measured by the fault campaign (``make soak``, docs/faults.md), not timed here."""
    words = " ".join(f"word{i % 9973}" for i in range(700_000))  # ~6 MB, ~1.4M tokens
    huge = json.dumps({"model": "gpt-4o", "messages": history(words)}).encode()
    assert post(trim_proxy, huge, CONVERSATION).status_code == 200
    received = max(mock.chat_requests(), key=lambda r: len(r.body))  # compacted, whole, sized
    assert json.loads(received.body)["messages"][-1]["content"] == words
    assert received.headers["content-length"] == str(len(received.body))
    assert "content-type" not in received.headers or received.headers["content-type"] == (
        "application/json"
    )
