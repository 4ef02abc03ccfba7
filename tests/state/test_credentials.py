"""Callers that authenticate without a Bearer token (Azure-style ``api-key``, ``x-api-key``,
``Basic``) are tenants of their own, and the summarizer calls the provider with the credential
they sent when it uses the caller's key."""

from __future__ import annotations

import httpx
import pytest

from proxy.state.tenancy import credential_headers
from proxy.types import HeaderView
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider


def turns(server, headers: dict[str, str], count: int) -> list[dict[str, str]]:
    """``count`` user turns of one conversation, sent as a non-openai client would."""
    history = [SYSTEM]
    outcomes = []
    for turn in range(count):
        history.append({"role": "user", "content": f"Step {turn}"})
        response = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": history},
            headers={"x-conversation-id": "same-id", **headers},
        )
        assert response.status_code == 200
        history.append(response.json()["choices"][0]["message"])
        outcomes.append(response.headers["x-compaction"])
    return history


def test_two_api_key_callers_are_two_tenants(mock, start_proxy) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url))
    turns(server, {"api-key": "azure-key-one"}, 9)
    assert provider.summaries == 1
    turns(server, {"api-key": "azure-key-two"}, 9)
    assert provider.summaries == 2  # nothing of the first caller's state was used
    # The summarizer called the provider with each caller's own key.
    summary_calls = [r for r in mock.chat_requests() if r.json()["model"] == "mock-summarizer"]
    assert [r.headers.get("api-key") for r in summary_calls] == ["azure-key-one", "azure-key-two"]
    assert all("authorization" not in r.headers for r in summary_calls)


@pytest.mark.parametrize(
    ("header", "one", "two"),
    [
        ("x-api-key", "anthropic-one", "anthropic-two"),
        ("authorization", "Basic dXNlcjpwYXNz", "Basic b3RoZXI6cGFzcw=="),
    ],
)
def test_other_credentials_are_tenants_and_reach_the_summarizer(
    mock, start_proxy, header: str, one: str, two: str
) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url))
    turns(server, {header: one}, 9)
    turns(server, {header: two}, 9)
    assert provider.summaries == 2
    summary_calls = [r for r in mock.chat_requests() if r.json()["model"] == "mock-summarizer"]
    assert [r.headers[header] for r in summary_calls] == [one, two]


def test_the_credential_headers_are_read_from_the_names_as_the_request_view_lowers_them() -> None:
    view = HeaderView.of(
        [(b"Api-Key", b"azure-key"), (b"X-API-KEY", b""), (b"Authorization", b"Basic x")]
    )
    assert credential_headers(view.values) == {"authorization": "Basic x", "api-key": "azure-key"}
