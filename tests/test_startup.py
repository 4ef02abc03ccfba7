"""What the proxy does before it serves: tiktoken's files are loaded at start-up, so the first
request never pays for reading (or downloading) them, and /readyz says how tokens are counted."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import tiktoken

from proxy.core.tokens import TokenCounter
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider


class Loader:
    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def __call__(self, name: str) -> Any:
        self.calls.append(name)
        if self.fail:
            raise OSError("no network to download tiktoken's files")
        return tiktoken.get_encoding(name)


def test_encodings_load_before_the_first_request(mock, start_proxy, tiktoken_files) -> None:
    Provider(mock)
    settings = summarizing(mock.url)
    loader = Loader()
    server = start_proxy(
        settings, counter=TokenCounter(settings.model_table(), load_encoding=loader)
    )
    assert "o200k_base" in loader.calls  # before any request arrived
    assert httpx.get(f"{server.url}/readyz").json()["tokenizer"] == "exact"
    loaded = list(loader.calls)
    openai_client(server).chat.completions.create(
        model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hello"}]
    )
    assert loader.calls == loaded  # the first request loaded nothing


def test_unloadable_encodings_warn_once_and_stay_ready(
    mock, start_proxy, caplog: pytest.LogCaptureFixture
) -> None:
    Provider(mock)
    settings = summarizing(mock.url)
    caplog.set_level(logging.WARNING, logger="proxy")
    server = start_proxy(
        settings, counter=TokenCounter(settings.model_table(), load_encoding=Loader(fail=True))
    )
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert ready.json()["tokenizer"] == "approximate"
    raw = openai_client(server).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[SYSTEM, {"role": "user", "content": "hello"}]
    )
    assert int(raw.headers["x-compaction-tokens-before"]) > 0  # the approximate counter
    warnings = [r for r in caplog.records if "tiktoken" in r.getMessage()]
    assert len(warnings) == 1
