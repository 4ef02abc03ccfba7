"""``clear_tool_results`` through a real proxy: a request where nothing was stubbed
is not compacted. It says ``X-Compaction: skipped``, is counted as skipped, and the provider
receives the client's exact bytes; once an old result is stubbed, it says ``applied``.
"""

from __future__ import annotations

import re

import httpx

from tests.support.cache_key import without_key
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider, take_turn

CLEARING = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"context_fraction": 0, "interactions": 100},  # no summary in this test
    "keep": {"interactions": 2},
    "clear_tool_results": {"older_than_interactions": 2},
}
BIG_RESULT = "\n" + "line of a long file, read by the agent\n" * 60


def compactions(metrics: str, outcome: str) -> int:
    found = re.search(rf'proxy_compactions_total{{[^}}]*outcome="{outcome}"[^}}]*}} (\S+)', metrics)
    return int(float(found.group(1))) if found else 0


def test_a_request_with_nothing_to_clear_is_skipped_and_forwarded_byte_for_byte(
    mock, start_proxy
) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=CLEARING))
    sent: list[bytes] = []  # the bytes the official client put on the wire, per request

    def keep_body(request: httpx.Request) -> None:
        sent.append(request.read())

    http = httpx.Client(event_hooks={"request": [keep_body]})
    client = openai_client(server, "clearing", http_client=http)
    history = [SYSTEM]
    seen = []
    for turn in range(5):  # a plain chat: no tool result anywhere, nothing to clear
        seen += take_turn(client, history, f"Question {turn}: what next?")
    seen += take_turn(client, history, "Step 5 TOOL", tool_output=BIG_RESULT)
    plain = len(seen)
    for turn in range(6, 10):  # the tool results grow older than two interactions
        seen += take_turn(client, history, f"Question {turn}: and then?")

    outcomes = [h["x-compaction"] for h in seen]
    received = [r.body for r in mock.chat_requests()]
    assert len(received) == len(sent) == len(seen)
    # A copy of the unchanged list once said "applied" from the third request on, with
    # before == after: a request nothing was stubbed in must say skipped.
    assert outcomes[:plain] == ["skipped"] * plain, outcomes
    for headers, body, client_bytes in zip(seen[:plain], received, sent, strict=False):
        assert headers["x-compaction-tokens-before"] == headers["x-compaction-tokens-after"]
        assert without_key(body) == client_bytes  # with the conversation's cache key first
    # Once the tool turn is older than two interactions its results are stubbed: applied.
    assert outcomes[-2:] == ["applied", "applied"]
    # What was applied, said without reading bodies: stubs, and only where applied.
    expected = ["stubs" if o == "applied" else None for o in outcomes]
    assert [h.get("x-compaction-applied") for h in seen] == expected
    for headers in seen[-2:]:
        assert int(headers["x-compaction-tokens-after"]) < int(
            headers["x-compaction-tokens-before"]
        )
    stubbed = provider.chat_requests()[-1]["messages"]
    results = [m["content"] for m in stubbed if m["role"] == "tool"]
    assert results and all(r.startswith("[tool result cleared") for r in results)
    # What is counted is what the headers said.
    metrics = httpx.get(f"{server.url}/metrics").text
    assert compactions(metrics, "applied") == outcomes.count("applied")
    assert 'applied="stubs",outcome="applied"' in metrics
    assert compactions(metrics, "skipped") == outcomes.count("skipped")
    assert provider.summaries == 0
