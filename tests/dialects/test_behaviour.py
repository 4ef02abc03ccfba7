"""The same behaviour on every compacted route: chat completions, the Responses API
and Anthropic Messages, each driven by its official client (tests/support/drivers.py) against
one mock provider that serves all three.

Each test plays one agent task (a tool call per round, tool outputs of a few hundred tokens) and
checks what a user notices, through a dialect-neutral view of what the provider received: the
summary applied once in the dialect's place, the task and the newest round verbatim, every tool
result with its call; forks that share a summary and edits that never get one; summaries made
ahead of time; an overflow rescued; tenants apart; the off switch byte for byte; bad input
refused in the dialect's error shape with nothing forwarded or stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from itertools import takewhile
from typing import Any

import httpx
import pytest

from tests.support.clients import admin_get
from tests.support.drivers import (
    DRIVERS,
    SUMMARY_OPEN,
    TASK,
    Driver,
    Entry,
    Exchange,
    Run,
)
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn

ROUNDS = 12  # rounds of one task: several summaries at the policy of Driver.start


@pytest.fixture(params=list(DRIVERS))
def driver(
    request: pytest.FixtureRequest,
    mock: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
) -> Iterator[Driver]:
    played = DRIVERS[request.param](mock, start_proxy)
    yield played
    played.close()


def check_prompt(driver: Driver, received: dict[str, Any], sent: bytes) -> Entry | None:
    """What any prompt the provider gets must be, next to what the client sent: the client's
    preamble, then at most one summary (in the dialect's place: the views know it), the task,
    and a verbatim run of the client's newest entries starting at a round boundary, every
    tool result right after its call. Returns the summary, if any."""
    got, had = driver.view(received), driver.view(json.loads(sent))
    preamble = list(takewhile(lambda e: e.kind == "preamble", had))
    assert got[: len(preamble)] == preamble, "the preamble, verbatim"
    rest = got[len(preamble) :]
    summary = rest.pop(0) if rest and rest[0].kind == "summary" else None
    if summary is not None:
        assert summary.text.count(SUMMARY_OPEN) == 1
    assert not [e for e in rest if SUMMARY_OPEN in e.text], "a summary out of its place"
    task = next(e for e in had if e.kind == "user")
    assert task.text == TASK and rest[0] == task, "the task is never summarized away"
    kept = rest[1:]
    assert kept == had[len(had) - len(kept) :], "not the client's newest entries verbatim"
    if summary is not None and kept:
        assert had[len(had) - len(kept) - 1].kind in ("result", "user"), "cut inside a round"
    check_pairs(got)
    return summary


def check_pairs(entries: list[Entry]) -> None:
    """Every tool result follows the assistant turn that called it; no call goes unanswered."""
    open_calls: set[str] = set()
    for entry in entries:
        if entry.kind == "result":
            assert entry.ids[0] in open_calls, f"a result without its call: {entry.ids}"
            open_calls.discard(entry.ids[0])
            continue
        assert not open_calls, f"calls without their results: {open_calls}"
        if entry.kind == "assistant":
            open_calls = set(entry.ids)
    assert not open_calls, f"calls without their results: {open_calls}"


def only_prompt(exchange: Exchange) -> tuple[int, dict[str, Any]]:
    assert len(exchange.prompts) == 1, "one client request, one prompt"
    return exchange.prompts[0]


def summary_numbers(value: Any) -> set[int]:
    """The mock summarizer numbers its summaries: SUMMARY-1, SUMMARY-2, ..."""
    return {int(n) for n in re.findall(r"SUMMARY-(\d+):", json.dumps(value))}


def stored_summaries(server: ThreadedUvicorn, conversation: str, **key: str) -> list[str]:
    record = admin_get(server, f"/conversations/{conversation}", **key)
    assert record.status_code == 200, record.text
    return [c["summary"] for c in record.json()["checkpoints"]]


def test_compaction_is_applied(driver: Driver) -> None:
    server = driver.start()
    run = driver.run("agent-1", ROUNDS)

    outcomes = run.outcomes
    assert "applied" in outcomes and not {"failed", "blocked"} & set(outcomes), outcomes
    for exchange in run.exchanges:
        _, body = only_prompt(exchange)
        summary = check_prompt(driver, body, exchange.sent)
        assert (summary is not None) == (exchange.outcome == "applied")
    last = run.exchanges[-1]
    _, body = only_prompt(last)
    assert driver.length(body) < driver.length(json.loads(last.sent)) / 2
    assert int(last.headers["x-compaction-tokens-before"]) > 2 * int(
        last.headers["x-compaction-tokens-after"]
    )
    # The summarizer read the run (the task first), and what it wrote is what the store holds.
    assert TASK in json.dumps(driver.providers.chat.summary_requests()[0]["messages"])
    newest = stored_summaries(server, "agent-1")[0]
    assert newest in check_prompt(driver, body, last.sent).text  # type: ignore[union-attr]


def test_forks_reuse_the_shared_summary_and_edits_never_get_one(driver: Driver) -> None:
    server = driver.start()
    run = driver.run("fork", ROUNDS)
    stored = stored_summaries(server, "fork")
    made = driver.providers.summaries
    assert stored and made == len(stored)

    # The newest round asked again (another answer comes back): the summary of the shared part
    # is applied as it is, none made again.
    fork = driver.run("fork", 1, driver.without_newest_round(run.history))
    exchange = fork.exchanges[0]
    summary = check_prompt(driver, only_prompt(exchange)[1], exchange.sent)
    assert summary is not None and any(s in summary.text for s in stored)
    assert exchange.outcome == "applied" and driver.providers.summaries == made

    # A tool result inside the summarized part edited: no summary of what this history lacks.
    edited = driver.run("fork", 1, driver.with_first_result_edited(run.history))
    exchange = edited.exchanges[0]
    _, body = only_prompt(exchange)
    summary = check_prompt(driver, body, exchange.sent)
    assert summary is not None, "a summary of its own"
    assert summary_numbers(summary.text).isdisjoint(summary_numbers(stored))
    assert driver.providers.summaries > made


def test_ahead_mode_summarizes_after_a_response_and_no_turn_waits(driver: Driver) -> None:
    server = driver.start(mode="ahead")
    run = driver.run("ahead", ROUNDS, between=driver.settle)

    outcomes = run.outcomes
    assert "applied" in outcomes and "failed" not in outcomes, outcomes
    first = outcomes.index("applied")
    assert set(outcomes[:first]) <= {"skipped", "pending"}, outcomes
    calls = driver.providers.summary_calls
    assert calls(run.exchanges[first].mark) >= 1, "made after an earlier response"
    for exchange in run.exchanges:
        index, body = only_prompt(exchange)
        check_prompt(driver, body, exchange.sent)
        # Nothing asked the summarizer between the client's request and the provider's prompt.
        assert calls(index) == calls(exchange.mark)
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'proxy_summarizer_calls_total{mode="ahead",outcome="ok"}' in metrics
    assert 'mode="inline"' not in metrics


@pytest.mark.parametrize("coding", [None, "gzip"])
def test_an_overflow_is_rescued_with_one_retry(driver: Driver, coding: str | None) -> None:
    """Also from a provider that compresses its answers, as real ones do: the overflow is read
    all the same, and the client gets the provider's bytes as they were."""
    driver.mock.compression = coding
    driver.start(input_tokens=1_000_000)  # never fires: only the rescue cuts
    run = driver.run("overflow", 8)
    assert set(run.outcomes) == {"skipped"} and driver.providers.summaries == 0
    limit = len(run.history) // 2
    driver.refuse_longer_than(limit)

    rescued = driver.run("overflow", 1, run.history)  # the client gets an answer: a tool call
    exchange = rescued.exchanges[0]
    assert exchange.headers["x-compaction-retried"] == "context_length_exceeded"
    assert exchange.headers.get("content-encoding") == coding
    assert len(exchange.prompts) == 2
    (_, refused), (_, retried) = exchange.prompts
    assert driver.view(refused) == driver.view(json.loads(exchange.sent)), "first as it came"
    assert driver.length(refused) > limit >= driver.length(retried)
    assert check_prompt(driver, retried, exchange.sent) is not None
    assert driver.providers.summaries == 1


def test_tenants_never_share_state(driver: Driver) -> None:
    server = driver.start()
    one = driver.run("same-id", ROUNDS, key="sk-tenant-one")
    record_one = admin_get(server, "/conversations/same-id", key="sk-tenant-one").json()
    theirs = summary_numbers([body for e in one.exchanges for _, body in e.prompts])
    assert theirs

    # The same conversation id and history under another key: its own summary, never theirs.
    two = driver.run("same-id", 1, driver.without_newest_round(one.history), key="sk-tenant-two")
    exchange = two.exchanges[0]
    _, body = only_prompt(exchange)
    summary = check_prompt(driver, body, exchange.sent)
    assert summary is not None and summary_numbers(body).isdisjoint(theirs)
    record_two = admin_get(server, "/conversations/same-id", key="sk-tenant-two").json()
    ids = {c["id"] for c in record_one["checkpoints"]}
    assert ids.isdisjoint(c["id"] for c in record_two["checkpoints"])
    assert admin_get(server, "/conversations/same-id", key="sk-tenant-one").json() == record_one


SWITCHES = {"header": {"X-Compaction": "off"}, "policy": {"X-Compaction-Policy": "frozen"}}


@pytest.mark.parametrize("switch", ["header", "policy", "no-conversation"])
def test_the_off_switch_sends_the_clients_bytes(driver: Driver, switch: str) -> None:
    driver.start()
    conversation = None if switch == "no-conversation" else "off"
    run = driver.run(conversation, ROUNDS, headers=SWITCHES.get(switch))

    for exchange in run.exchanges:
        assert exchange.outcome == "off"
        index, _ = only_prompt(exchange)
        assert driver.mock.received[index].body == exchange.sent
    assert driver.providers.summaries == 0
    # The same history, named and switched on, is compacted: the switch is what kept it whole.
    assert driver.run("on", 1, run.history).outcomes == ["applied"]


def test_bad_input_is_a_4xx_in_the_dialects_shape_and_changes_nothing(driver: Driver) -> None:
    server = driver.start()
    for body, fragment in driver.bad_bodies():
        response = driver.post_raw(body, {"x-conversation-id": "bad"})
        assert response.status_code == 400, (body, response.text)
        kind, message = driver.error_of(response)
        assert kind == "invalid_request_error" and fragment in message, message
    for headers in ({"x-conversation-id": "bad id"}, {"x-compaction-policy": "no-such"}):
        response = driver.post_raw(driver.good_body(), {"x-conversation-id": "bad", **headers})
        assert response.status_code == 400, response.text
        kind, message = driver.error_of(response)
        assert kind == "invalid_request_error" and next(iter(headers)) in message.lower()

    assert driver.mock.received == []
    assert admin_get(server, "/conversations/bad").status_code == 404


def test_the_views_read_a_run_alike(driver: Driver) -> None:
    """The suite's own yardstick: each dialect's view of the same agent run has one shape."""
    driver.start(input_tokens=1_000_000)
    run: Run = driver.run("shape", 2)
    kinds = [e.kind for e in driver.view(json.loads(run.exchanges[-1].sent))]
    preamble = list(takewhile(lambda k: k == "preamble", kinds))
    assert preamble and kinds[len(preamble) :] == ["user", "assistant", "result"]
