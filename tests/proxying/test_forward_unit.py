"""Unit tests of the forwarding layer: the app in-process, the provider mocked with respx."""

from __future__ import annotations

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config.settings import parse_settings
from proxy.proxying.headers import request_headers_upstream, response_headers_downstream
from proxy.proxying.targets import upstream_url

BASE = "http://provider.test/v1"


@pytest.fixture
def client():
    settings = parse_settings(
        f"upstream: {{base_url: '{BASE}', transport: httpx}}\nserver: {{max_body_bytes: 2048}}",
        environ={},
    )
    with (
        respx.mock(base_url=BASE, assert_all_called=False) as router,
        TestClient(create_app(settings)) as test_client,
    ):
        test_client.router = router
        yield test_client


def test_request_headers_sent_upstream(client) -> None:
    route = client.router.post("/chat/completions").respond(json={"ok": True})
    client.post(
        "/v1/chat/completions?api-version=2024-10-21",
        json={"messages": [{"role": "user", "content": "hi"}]},
        headers={
            "authorization": "Bearer sk-user",
            "x-conversation-id": "abc",
            "x-compaction-policy": "default",
            "connection": "x-hop",
            "x-hop": "1",
            "openai-organization": "org-1",
        },
    )
    request = route.calls.last.request
    assert request.url == f"{BASE}/chat/completions?api-version=2024-10-21"
    assert request.headers["authorization"] == "Bearer sk-user"
    assert request.headers["openai-organization"] == "org-1"
    assert request.headers["host"] == "provider.test"
    for dropped in ("x-conversation-id", "x-compaction-policy", "x-hop"):
        assert dropped not in request.headers


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (httpx.ConnectError("refused"), 502, "upstream_unavailable"),
        (httpx.RemoteProtocolError("garbage"), 502, "upstream_unavailable"),
        (httpx.ConnectTimeout("slow"), 504, "upstream_timeout"),
        (httpx.ReadTimeout("slow"), 504, "upstream_timeout"),
        (httpx.PoolTimeout("busy"), 504, "upstream_timeout"),
    ],
)
def test_transport_errors_become_openai_errors(client, error, status, code) -> None:
    client.router.post("/chat/completions").mock(side_effect=error)
    response = client.post("/v1/chat/completions", json={"messages": []})
    assert response.status_code == status
    body = response.json()
    assert body["error"]["code"] == code
    assert body["error"]["type"] == "upstream_error"
    assert "Traceback" not in response.text


def test_provider_error_passes_through_untouched(client) -> None:
    body = b'{"error": {"message": "context_length_exceeded", "type": "invalid_request_error"}}'
    client.router.post("/chat/completions").respond(
        400, content=body, headers={"x-request-id": "r1"}
    )
    response = client.post("/v1/chat/completions", json={"messages": []})
    assert response.status_code == 400
    assert response.content == body
    assert response.headers["x-request-id"] == "r1"


def test_body_limit_counts_bytes_not_headers(client) -> None:
    route = client.router.post("/chat/completions").respond(json={})
    ok = client.post("/v1/chat/completions", content=b'{"messages": []}' + b" " * 2000)
    assert ok.status_code == 200
    too_big = client.post("/v1/chat/completions", content=b'{"messages": []}' + b" " * 2100)
    assert too_big.status_code == 413
    assert route.call_count == 1


def test_upstream_url_keeps_base_path_and_query() -> None:
    scope = {"path": "/v1/files/f 1", "raw_path": b"/v1/files/f%201", "query_string": b"a=1&b=%20"}
    assert (
        upstream_url("http://h:1/openai/v1/", scope) == "http://h:1/openai/v1/files/f%201?a=1&b=%20"
    )


@pytest.mark.parametrize("raw", [b"/v1/../x", b"/v1/a/%2e%2e/b", b"/v1/./x", b"/v1/a\\b"])
def test_upstream_url_refuses_dot_segments(raw: bytes) -> None:
    from proxy.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        upstream_url("http://h/v1", {"path": raw.decode(), "raw_path": raw, "query_string": b""})


def test_hop_by_hop_filtering_both_ways() -> None:
    incoming = [
        (b"Connection", b"close, X-Private"),
        (b"X-Private", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Host", b"proxy:8080"),
        (b"Authorization", b"Bearer user"),
        (b"X-Conversation-Id", b"c"),
        (b"Content-Length", b"10"),
        (b"Accept", b"*/*"),
        (b"Expect", b"100-continue"),  # answered at our hop
    ]
    out = dict(
        request_headers_upstream(
            incoming, own_headers=frozenset({b"x-conversation-id"}), api_key=None
        )
    )
    assert out == {b"Authorization": b"Bearer user", b"Content-Length": b"10", b"Accept": b"*/*"}
    keyed = dict(
        request_headers_upstream(
            incoming, own_headers=frozenset(), api_key="sk-p", drop_content_length=True
        )
    )
    assert keyed[b"authorization"] == b"Bearer sk-p"
    assert b"Authorization" not in keyed and b"Content-Length" not in keyed
    assert keyed[b"X-Conversation-Id"] == b"c"  # not one of this call's own headers

    back = response_headers_downstream(
        [
            (b"Content-Type", b"text/event-stream"),
            (b"Transfer-Encoding", b"chunked"),
            (b"Upgrade", b"h2c"),
        ]
    )
    assert back == [(b"content-type", b"text/event-stream")]
