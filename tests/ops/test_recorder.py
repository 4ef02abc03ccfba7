"""record.path: chat requests appended to a JSONL file, off by default, read back by ``eval``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import openai

from proxy.tools.evaluation.transcripts import read_jsonl
from tests.support.config import config
from tests.support.mock_upstream import MockUpstream
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn


def chat(proxy: ThreadedUvicorn, history: list[dict[str, str]], conversation: str) -> None:
    client = closed_after_test(
        openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test", max_retries=0)
    )
    reply = client.chat.completions.create(
        model="gpt-4o", messages=history, extra_headers={"X-Conversation-Id": conversation}
    )
    history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})


def test_requests_are_recorded_as_transcripts(
    tmp_path: Path, mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]
) -> None:
    log = tmp_path / "recorded.jsonl"
    url = mock.url
    proxy = start_proxy(config(provider=url, record={"path": str(log)}))
    history = [{"role": "user", "content": "The build id is build-42."}]
    chat(proxy, history, "conv-1")
    history.append({"role": "user", "content": "And now?"})
    chat(proxy, history, "conv-1")
    chat(proxy, [{"role": "user", "content": "Another one."}], "conv-2")

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["conversation"], len(line["messages"])) for line in lines] == [
        ("conv-1", 1),
        ("conv-1", 3),
        ("conv-2", 1),
    ]
    assert lines[1]["messages"] == history[:3]  # the client's history, not what was forwarded
    transcripts = read_jsonl(log)
    assert [(t.name, len(t.messages)) for t in transcripts] == [
        ("recorded:conv-1", 3),
        ("recorded:conv-2", 1),
    ]


def test_nothing_is_recorded_by_default(
    tmp_path: Path,
    mock: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
    monkeypatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    proxy = start_proxy(config(provider=mock.url))
    chat(proxy, [{"role": "user", "content": "secret plans"}], "conv-1")
    assert list(tmp_path.iterdir()) == []
