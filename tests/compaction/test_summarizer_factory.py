"""How the proxy builds summarizers: credentials and the summarizer model's own window."""

from __future__ import annotations

import httpx
import pytest
import respx

from proxy.compaction.summaries.summarizer import summarizer_factory
from proxy.config.settings import parse_settings
from proxy.core.tokens import TokenCounter

BASE = "http://provider.test/v1"


def _settings(extra: str = ""):
    return parse_settings(
        f"upstream: {{base_url: '{BASE}'}}\n"
        "summarizer: {model: tiny-summarizer, max_summary_tokens: 200}\n"
        "models: {'tiny-*': {context_window: 2000, encoding: o200k_base}}\n" + extra,
        environ={},
    )


@pytest.mark.anyio
async def test_chunks_fit_the_summarizer_models_window(tiktoken_files) -> None:
    settings = _settings()
    counter = TokenCounter(settings.model_table())
    transcript = [
        {"role": "user", "content": f"Step {i}: " + "please refactor the parser module " * 30}
        for i in range(24)
    ]
    assert counter.count_messages(transcript, "gpt-4o") > 4000
    with respx.mock(base_url=BASE) as router:
        route = router.post("/chat/completions").respond(
            json={"choices": [{"message": {"role": "assistant", "content": "short summary"}}]}
        )
        async with httpx.AsyncClient() as client:
            make = summarizer_factory(
                settings.summarizer, settings.upstream, settings.model_table(), client, counter
            )
            await make({"authorization": "Bearer sk-caller"}).summarize(
                transcript, previous=None, model="tiny-summarizer", max_tokens=200
            )
    assert route.call_count >= 3  # chunked, not one call over the window
    for call in route.calls:
        body = call.request.read().decode()
        sent = counter.count_text(body, "tiny-summarizer")
        assert sent < 2000, sent
        assert call.request.headers["authorization"] == "Bearer sk-caller"


@pytest.mark.anyio
async def test_callers_key_never_goes_to_another_summarizer_host() -> None:
    settings = _settings("summarizer: {model: tiny-summarizer, base_url: 'http://other.test/v1'}\n")
    counter = TokenCounter(settings.model_table())
    with respx.mock(base_url="http://other.test/v1") as router:
        route = router.post("/chat/completions").respond(
            json={"choices": [{"message": {"role": "assistant", "content": "s"}}]}
        )
        async with httpx.AsyncClient() as client:
            make = summarizer_factory(
                settings.summarizer, settings.upstream, settings.model_table(), client, counter
            )
            await make({"authorization": "Bearer sk-caller"}).summarize(
                [{"role": "user", "content": "hi"}], previous=None, model="m", max_tokens=50
            )
    assert "authorization" not in route.calls.last.request.headers


@pytest.mark.anyio
async def test_the_callers_own_credential_headers_are_forwarded() -> None:
    settings = _settings()
    counter = TokenCounter(settings.model_table())
    sent = {"api-key": "azure-key", "authorization": "Basic dXNlcjpwYXNz"}
    with respx.mock(base_url=BASE) as router:
        route = router.post("/chat/completions").respond(
            json={"choices": [{"message": {"role": "assistant", "content": "s"}}]}
        )
        async with httpx.AsyncClient() as client:
            make = summarizer_factory(
                settings.summarizer, settings.upstream, settings.model_table(), client, counter
            )
            await make(sent).summarize(
                [{"role": "user", "content": "hi"}], previous=None, model="m", max_tokens=50
            )
    headers = route.calls.last.request.headers
    assert headers["api-key"] == "azure-key"
    assert headers["authorization"] == "Basic dXNlcjpwYXNz"


@pytest.mark.anyio
async def test_a_policys_own_host_never_gets_the_global_summarizer_key() -> None:
    settings = _settings(
        "summarizer: {model: m, base_url: 'http://global.test/v1', api_key: sk-global}\n"
        "policies: {own: {summarizer: {base_url: 'http://policy.test/v1'}}}\n"
    )
    own = settings.summarizer.for_policy(settings.policies["own"], request_model="gpt-4o")
    counter = TokenCounter(settings.model_table())
    with respx.mock(base_url="http://policy.test/v1") as router:
        route = router.post("/chat/completions").respond(
            json={"choices": [{"message": {"role": "assistant", "content": "s"}}]}
        )
        async with httpx.AsyncClient() as client:
            make = summarizer_factory(
                settings.summarizer, settings.upstream, settings.model_table(), client, counter
            )
            await make({"authorization": "Bearer sk-caller"}, own).summarize(
                [{"role": "user", "content": "hi"}], previous=None, model="m", max_tokens=50
            )
    assert "authorization" not in route.calls.last.request.headers
