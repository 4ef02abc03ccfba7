"""The app's ASGI entry as a client meets it: which route serves a request, what an unexpected
failure answers, and the access log's line either way."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from proxy.types import RawHeaders
from proxy.upstream.base import Body, UpstreamResponse
from tests.support.config import config
from tests.support.mock_upstream import MockUpstream

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


class BrokenUpstream:
    """An upstream client with a bug: every send raises what no layer of the proxy expects."""

    async def send(
        self, method: str, url: str, headers: RawHeaders, body: Body
    ) -> UpstreamResponse:
        raise RuntimeError("a bug")

    async def aclose(self) -> None:
        pass


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "proxy.access"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_an_unexpected_failure_is_a_plain_500_and_logged(
    mock: MockUpstream, start_proxy, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    proxy = start_proxy(config(provider=mock.url), upstream=BrokenUpstream())
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        response = httpx.post(
            f"{proxy.url}{path}", json=CHAT, headers={"authorization": "Bearer k"}
        )
        assert response.status_code == 500
        assert response.text == "Internal Server Error"
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        # The server is still serving.
        assert httpx.get(f"{proxy.url}/healthz").status_code == 200
    (line,) = access_lines(caplog)
    assert (line["method"], line["path"], line["status"]) == ("POST", path, 500)
    assert line["upstream_ms"] is None


def test_a_compacted_path_with_another_method_passes_through(
    proxy, mock: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        response = httpx.get(f"{proxy.url}/v1/chat/completions?x=1")
    assert response.status_code == 200
    (received,) = mock.received
    assert (received.method, received.path) == ("GET", "/v1/chat/completions")
    (line,) = access_lines(caplog)
    assert (line["method"], line["path"], line["status"]) == ("GET", "/v1/chat/completions", 200)


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1/responses/compact/x"])
def test_a_path_near_a_compacted_one_passes_through(proxy, mock: MockUpstream, path: str) -> None:
    response = httpx.post(f"{proxy.url}{path}", json=CHAT)
    assert response.status_code == 200
    (received,) = mock.received
    assert (received.method, received.path) == ("POST", path)
    assert received.json() == CHAT  # unchanged: not read by compaction


def test_a_compacted_request_is_logged_once(
    proxy, mock: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        response = httpx.post(
            f"{proxy.url}/v1/chat/completions?api-version=1",
            content=json.dumps(CHAT).encode(),
            headers={"x-conversation-id": "front-1", "content-type": "application/json"},
        )
    assert response.status_code == 200
    (line,) = access_lines(caplog)
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/chat/completions", 200)
    assert isinstance(line["upstream_ms"], float)
    assert line["bytes_in"] == len(json.dumps(CHAT))


def test_unknown_paths_and_probes_are_still_the_apps(proxy) -> None:
    assert httpx.get(f"{proxy.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{proxy.url}/readyz").json()["status"] == "ready"  # the lifespan ran
    missing = httpx.get(f"{proxy.url}/nowhere")
    assert missing.status_code == 404
