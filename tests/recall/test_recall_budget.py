"""``recall.budget_bytes`` bounds what is kept per conversation, on both backends: a tool result
or a summarized turn larger than the budget is kept cut, and says so when it is recalled."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis import Redis

from tests.support.clients import admin_get, openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, take_turn
from tests.support.recall_provider import CLEARING, RecallProvider, cleared_history
from tests.support.servers import ThreadedUvicorn

SECRET = "SECRET-5150"
BUDGET = 4096
HUGE = f"\nthe id is {SECRET}\n" + "a line of a very long log\n" * 20_000  # ~520 KB


def _kept(server: ThreadedUvicorn, conversation: str) -> list[dict[str, Any]]:
    """The originals kept for ``conversation`` (written after the answers, off their path)."""
    deadline = time.monotonic() + 5
    while (
        shown := admin_get(server, f"/conversations/{conversation}/originals")
    ).status_code != 200:
        assert time.monotonic() < deadline, shown.text
        time.sleep(0.02)
    return shown.json()["data"]


def _size(items: list[dict[str, Any]]) -> int:
    return sum(len(item["content"].encode()) for item in items)


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_tool_result_over_the_budget_is_kept_cut_and_says_so(
    mock, start_proxy, request: pytest.FixtureRequest, backend: str
):
    url = "memory://" if backend == "memory" else request.getfixturevalue("redis_url")
    RecallProvider(mock)
    settings = summarizing(mock.url, url, policy=CLEARING, recall={"budget_bytes": BUDGET})
    server = start_proxy(settings)
    client = openai_client(server, f"budget-{backend}")
    cleared_history(client, HUGE)

    kept = _kept(server, f"budget-{backend}")
    assert _size(kept) <= BUDGET
    cut = [item["content"] for item in kept if SECRET in item["content"]]
    assert cut and all("kept cut" in c for c in cut)  # a recall of it says it is not all of it
    if backend == "redis":  # what Redis itself holds: no value near the tool result's size
        with Redis.from_url(url) as raw:
            sizes = [len(raw.get(k) or b"") for k in raw.scan_iter() if raw.type(k) == b"string"]
        assert max(sizes) < 2 * BUDGET, sizes


def test_a_summarized_turn_over_the_budget_is_kept_cut(mock, start_proxy):
    """A turn longer than a segment (``max_result_bytes``) is one segment; it is kept cut (and
    evicted by the next pieces: a cut piece fills the budget)."""
    RecallProvider(mock)
    policy = {
        "strategy": "summarize",
        "trigger": {"context_fraction": 0, "interactions": 4},
        "keep": {"interactions": 1},
    }
    recall = {"budget_bytes": 2 * BUDGET, "max_result_bytes": 2048}
    server = start_proxy(summarizing(mock.url, policy=policy, recall=recall))
    client = openai_client(server, "budget-summary")
    history = [SYSTEM]
    seen = []
    for turn in range(12):  # the long turn is the newest one the summary covers
        text = f"Question {turn}: and then? " + "Some detail. " * 60
        if turn == 4:
            text = f"Remember {SECRET}: " + "a long paste of a log line. " * 4000
        take_turn(client, history, text)
        shown = admin_get(server, "/conversations/budget-summary/originals")
        if shown.status_code == 200:
            seen.append(shown.json()["data"])

    assert seen and all(_size(kept) <= 2 * BUDGET for kept in seen)
    cut = [i["content"] for kept in seen for i in kept if SECRET in i["content"]]
    assert cut and all("kept cut" in c for c in cut)
