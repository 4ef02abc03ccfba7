"""Hooks through the real proxy: a hook class from tests/ops/hook_module.py edits
what the provider receives and sees each new summary; hooks that fail, hang or return garbage
are logged without content, counted, and the request goes on as if they were absent."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.config.settings import Settings
from proxy.errors import ConfigError
from tests.support.cache_key import without_key
from tests.support.clients import admin_view, openai_client
from tests.support.config import COMPACTING, EVERY_THREE_INTERACTIONS, config
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider, check_sent, talk

KEY = "sk-hook-caller"
MODULE = "tests.ops.hook_module"


def with_hooks(provider: str, hooks: list[dict[str, Any]]) -> Settings:
    """A summary every three interactions, and ``hooks``."""
    policies = {"default": EVERY_THREE_INTERACTIONS}
    return config(COMPACTING, provider=provider, policies=policies, hooks=hooks)


def lines(path: Path, stage: str, count: int) -> list[dict[str, Any]]:
    """The hook's records of ``stage``, once there are ``count`` (after_summary runs after the
    response: poll, bounded)."""
    for _ in range(200):
        found = [e for e in map(json.loads, path.read_text().splitlines()) if e["stage"] == stage]
        if len(found) >= count:
            return found
        time.sleep(0.025)
    raise AssertionError(f"{stage}: {len(found)} records, expected {count}")


def test_a_hook_edits_what_is_sent_and_sees_every_summary(
    mock: MockUpstream, start_proxy, tmp_path: Path
) -> None:
    provider = Provider(mock)
    record = tmp_path / "hook.jsonl"
    record.touch()
    hooks = [{"class": f"{MODULE}:Tagger", "record": str(record), "tag": " [hooked]"}]
    server = start_proxy(with_hooks(mock.url, hooks))
    history = talk(openai_client(server, "conv-hooked", key=KEY), 6)

    sent = provider.chat_requests()
    assert all(r["messages"][-1]["content"].endswith(" [hooked]") for r in sent)
    assert not any("[hooked]" in str(m.get("content")) for m in history)  # the client's own
    before = lines(record, "before_send", len(sent))
    assert {e["conversation_id"] for e in before} == {"conv-hooked"}
    assert {(e["policy"], e["dialect"], e["model"]) for e in before} == {
        ("default", "chat", "gpt-4o")
    }
    assert [e["messages"] for e in before] == [len(r["messages"]) for r in sent]

    shown = admin_view(server, "conv-hooked", key=KEY)
    assert {e["tenant"] for e in before} == {shown["tenant"]}
    stored = shown["checkpoints"]
    assert stored and provider.summaries == len(stored)
    after = lines(record, "after_summary", len(stored))
    by_id = {c["id"]: c for c in stored}
    for event in after:
        checkpoint = by_id[event["checkpoint_id"]]
        assert event["tenant"] == shown["tenant"]
        assert event["conversation_id"] == "conv-hooked"
        assert event["summary"] == checkpoint["summary"]
        assert event["parent_id"] == checkpoint["parent_id"]
        assert event["covered_messages"] == checkpoint["covered_messages"]
    # The checkpoint a request applied is the one the hook was told about.
    assert before[-1]["checkpoint"] in by_id


def test_failing_hooks_fail_open(
    mock: MockUpstream, start_proxy, caplog: pytest.LogCaptureFixture
) -> None:
    provider = Provider(mock)
    hooks = [
        {"class": f"{MODULE}:{name}", "timeout_seconds": 0.2}
        for name in ("Raises", "Sleeps", "Garbage")
    ]
    server = start_proxy(with_hooks(mock.url, hooks))
    with caplog.at_level(logging.WARNING, logger="proxy.hooks"):
        history = talk(openai_client(server, "conv-failing", key=KEY), 6)
        metrics = httpx.get(f"{server.url}/metrics").text
        for _ in range(200):  # after_summary fails after the response
            if 'outcome="error",stage="after_summary"' in metrics:
                break
            time.sleep(0.025)
            metrics = httpx.get(f"{server.url}/metrics").text

    sent = provider.chat_requests()
    assert provider.summaries >= 1
    for request in sent:  # as if no hook were configured
        assert "[hooked]" not in json.dumps(request)
    check_sent(sent[-1]["messages"], history)
    assert sent[-1]["messages"][-1] == history[-2]  # the newest user turn, untouched
    turns = len(sent)
    for hook, outcome in (("Raises", "error"), ("Sleeps", "timeout"), ("Garbage", "invalid")):
        line = (
            f'proxy_hook_calls_total{{hook="{MODULE}:{hook}",outcome="{outcome}",'
            f'stage="before_send"}} {turns}.0'
        )
        assert line in metrics
    assert 'hook="tests.ops.hook_module:Raises",outcome="error",stage="after_summary"' in metrics
    logged = [r.getMessage() for r in caplog.records if r.name == "proxy.hooks"]
    assert logged and all("Step" not in m and "SUMMARY" not in m for m in logged)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"class": "tests.ops.no_such_module:X"}, "cannot import"),
        ({"class": f"{MODULE}:NoMethods"}, "defines neither"),
        ({"class": f"{MODULE}:Tagger", "colour": "red"}, "cannot build"),
    ],
)
def test_a_hook_that_cannot_be_used_stops_start_up(entry: dict[str, Any], message: str) -> None:
    settings = with_hooks("http://127.0.0.1:9", [entry])
    with pytest.raises(ConfigError, match=message):
        create_app(settings)


def test_a_hook_that_changes_nothing_leaves_the_clients_bytes(
    mock: MockUpstream, start_proxy
) -> None:
    server = start_proxy(with_hooks(mock.url, [{"class": f"{MODULE}:Observer"}]))
    raw = b'{"model":  "gpt-4o",   "messages": [ {"role": "user", "content": "hi"} ]}'
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "x-conversation-id": "conv-observed"},
    )
    assert response.headers["x-compaction"] == "skipped"
    assert without_key(mock.received[-1].body) == raw  # the conversation's cache key first
