"""What the console reads, through a real proxy: its files with their headers, the listing with
each conversation's ledger, and a conversation's timeline of answered requests."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from proxy.compaction.money import books
from proxy.ops.console.pages import static_files
from tests.ops.console.scene import (
    OTHER_KEY,
    TOOL_OUTPUT,
    BillingProvider,
    talk,
)
from tests.support.clients import admin_get
from tests.support.config import config
from tests.support.servers import ThreadedUvicorn


def test_the_pages_are_served_with_a_policy_that_forbids_inline_code(
    server: ThreadedUvicorn,
) -> None:
    moved = httpx.get(f"{server.url}/admin/ui")
    assert moved.status_code == 308 and moved.headers["location"] == "ui/"
    page = httpx.get(f"{server.url}/admin/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "style-src 'self';" in policy
    assert "unsafe-inline" not in policy and "default-src 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"

    # Every script the page loads is a file of the package; none is inline, nor any style.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, flags=re.S)
    assert scripts and all('src="' in attrs and not body.strip() for attrs, body in scripts)
    files = static_files()
    for name, (body, _) in files.items():
        text = body.decode()
        assert not re.search(r"\sstyle=|\son[a-z]+=|innerHTML|eval\(|https?://(?!www\.w3)", text), (
            name
        )
        served = httpx.get(f"{server.url}/admin/ui/{name}")
        assert served.status_code == 200 and served.content == body
        assert served.headers["content-security-policy"] == policy
    assert {"index.html", "console.js", "console.css"} <= set(files)
    imported = set(
        re.findall(r'from "\./([a-z]+\.js)"', "".join(b.decode() for b, _ in files.values()))
    )
    assert imported and imported <= set(files)  # every module a page imports is served

    missing = httpx.get(f"{server.url}/admin/ui/secrets.txt")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_no_console_without_an_admin_token(mock, start_proxy) -> None:
    server = start_proxy(config(provider=mock.url))
    for path in ("/admin/ui", "/admin/ui/", "/admin/ui/console.js"):
        assert httpx.get(f"{server.url}{path}").status_code == 404


def test_the_listing_carries_each_conversations_ledger(server: ThreadedUvicorn) -> None:
    talk(server, "conv-a", 4)
    talk(server, "conv-b", 7)
    talk(server, "conv-c", 4, key=OTHER_KEY)
    page = admin_get(server, "/conversations").json()
    assert [item["conversation_id"] for item in page["data"]] == ["conv-b", "conv-a"]
    for item in page["data"]:
        ledger = admin_get(server, f"/conversations/{item['conversation_id']}/ledger").json()
        assert item["ledger"] == ledger["ledger"] and item["ledger"]["requests"] > 0
    (other,) = admin_get(server, "/conversations", key=OTHER_KEY).json()["data"]
    assert other["conversation_id"] == "conv-c" and other["ledger"]["requests"] > 0


def test_the_timeline_is_one_point_per_answered_request_as_planned_and_billed(
    mock, billing: BillingProvider, server: ThreadedUvicorn
) -> None:
    talk(server, "conv-a", 7, tool_output=TOOL_OUTPUT)
    shown = admin_get(server, "/conversations/conv-a/timeline").json()
    turns: list[dict[str, Any]] = shown["turns"]
    billed = [
        r for r in mock.chat_requests() if r.json()["model"] != "mock-summarizer"
    ]  # the conversation's own requests, in order
    assert shown["max_turns"] == books.MAX_TURNS
    assert (
        len(turns)
        == len(billed)
        == admin_get(server, "/conversations/conv-a/ledger").json()["ledger"]["requests"]
    )
    record = admin_get(server, "/conversations/conv-a").json()
    stored = {c["id"] for c in record["checkpoints"]}
    for turn, request in zip(turns, billed, strict=True):
        sent = request.json()["messages"]
        if turn["checkpoint"] is None:  # sent as the client sent it
            assert turn["sent_tokens"] == turn["full_tokens"]
            assert turn["messages"] == len(sent)
            assert not sent[1]["content"].startswith("<agent_summary>")
        else:  # a summary stood for the older turns
            assert turn["checkpoint"] in stored
            assert turn["sent_tokens"] < turn["full_tokens"]
            assert turn["messages"] > len(sent)
            assert sent[1]["content"].startswith("<agent_summary>")
    assert [t["messages"] for t in turns] == sorted(t["messages"] for t in turns)
    # What the provider billed, its cache reads included (not every turn reads from it).
    assert [(t["billed_tokens"], t["cached_tokens"]) for t in turns] == billing.billed
    assert 0 < sum(t["cached_tokens"] > 0 for t in turns) < len(turns)
    assert len({t["checkpoint"] for t in turns if t["checkpoint"]}) >= 2


def test_the_timeline_keeps_the_newest_points_and_goes_with_the_conversation(
    server: ThreadedUvicorn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(books, "MAX_TURNS", 4)
    talk(server, "conv-a", 5)
    turns = admin_get(server, "/conversations/conv-a/timeline").json()["turns"]
    ledger = admin_get(server, "/conversations/conv-a/ledger").json()["ledger"]
    assert len(turns) == 4 < ledger["requests"]
    assert turns == sorted(turns, key=lambda t: t["at"])
    assert turns[-1]["messages"] > turns[0]["messages"]  # the newest kept
    # Another tenant never sees it, and an unknown conversation has no points.
    assert admin_get(server, "/conversations/conv-a/timeline", key=OTHER_KEY).json()["turns"] == []
    assert admin_get(server, "/conversations/conv-b/timeline").json()["turns"] == []

    assert admin_get(server, "/conversations/conv-a", method="DELETE").json()["deleted"]
    assert admin_get(server, "/conversations/conv-a/timeline").json()["turns"] == []
