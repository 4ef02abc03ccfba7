"""Fault cases of hostile text, part of ``make test``: what a client may legally send
that no encoder downstream of the proxy accepts as it is, and input big enough to hold the
event loop.

Each is driven as a client sends it, against a real proxy and the scripted mock provider of all
three dialects (tests/support/drivers.py) on free loopback ports. The official SDKs refuse to
send a lone surrogate or a NaN (they encode strictly), so those bodies go as raw bytes, as any
other client (or ``json.dumps`` with its defaults) sends them. docs/faults.md lists the cases.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config.settings import Settings
from proxy.core.tokens import TokenCounter
from tests.support.config import EVERY_FOUR_INTERACTIONS, SUMMARIZER_MODEL, config
from tests.support.drivers import Providers
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

ADMIN = "admin-token-for-text-faults"
KEY = "sk-text-faults"
SURROGATE = "\ud800"  # a lone high surrogate: valid JSON as "\ud800", invalid UTF-8 once decoded
REPLACEMENT = "\ufffd"  # what the summarizer sees in its place (docs/policies.md)


def text_config(provider: str, *, mode: str = "inline", **sections: Any) -> Settings:
    """The issue's policy: summarize every 4 interactions, keep 2, with the mock summarizer; both
    upstreams (OpenAI-compatible and Anthropic) at ``provider``; then ``sections``."""
    proxy = {
        "upstream": {"anthropic_base_url": provider},
        "store": {"url": "memory://", "tenant_secret": "text-faults-tenant-secret-0123456789"},
        "summarizer": {"model": SUMMARIZER_MODEL, "timeout_seconds": 10},
        "admin": {"token": ADMIN},
        "policies": {"default": {**EVERY_FOUR_INTERACTIONS, "mode": mode}},
    }
    return config(proxy, sections, provider=provider)


OPENAI_AUTH = {"authorization": f"Bearer {KEY}"}
ANTHROPIC_AUTH = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@dataclass(frozen=True)
class Route:
    """One compacted route: its path, its metrics label, a body holding a chat history, and
    the credential headers its SDK sends."""

    path: str
    label: str
    body: Callable[[list[dict[str, str]]], dict[str, Any]]
    auth: dict[str, str]


ROUTES = {
    "chat": Route(
        "/v1/chat/completions",
        "chat",
        lambda history: {"model": "gpt-4o", "messages": history},
        OPENAI_AUTH,
    ),
    "responses": Route(
        "/v1/responses",
        "responses",
        lambda history: {"model": "gpt-4o", "input": [{"type": "message", **m} for m in history]},
        OPENAI_AUTH,
    ),
    "messages": Route(
        "/v1/messages",
        "messages",
        lambda history: {"model": "claude-mock-1", "max_tokens": 64, "messages": history},
        ANTHROPIC_AUTH,
    ),
}


@pytest.fixture
def providers(mock: MockUpstream) -> Providers:
    return Providers(mock)


@pytest.fixture
def start(
    mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn], providers: Providers
) -> Callable[..., ThreadedUvicorn]:
    """start(mode=..., **sections) -> a proxy (text_config) in front of the mock of every
    dialect."""

    def run(*, mode: str = "inline", **sections: Any) -> ThreadedUvicorn:
        return start_proxy(text_config(mock.url, mode=mode, **sections))

    return run


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def raw(body: dict[str, Any]) -> bytes:
    """The body as ``json.dumps`` writes it by default: a lone surrogate as its ``\\u`` escape,
    NaN as ``NaN`` (what the SDKs refuse to send, and plenty of clients do)."""
    return json.dumps(body).encode()


def post(
    http: httpx.Client, proxy: ThreadedUvicorn, route: Route, body: bytes, conversation: str
) -> httpx.Response:
    headers = {
        **route.auth,
        "content-type": "application/json",
        "x-conversation-id": conversation,
    }
    return http.post(f"{proxy.url}{route.path}", content=body, headers=headers)


def summary_calls(mock: MockUpstream) -> list[dict[str, Any]]:
    """The summarizer's requests, parsed as the provider parses them: strict UTF-8 JSON."""
    calls = []
    for request in mock.chat_requests():
        body = json.loads(request.body.decode("utf-8"))  # a lone surrogate's bytes would fail
        if body.get("model") == SUMMARIZER_MODEL:
            calls.append(body)
    return calls


def add_turn(history: list[dict[str, str]], n: int) -> None:
    """The assistant's ``ok`` and user turn ``n``: long enough that a summary replaces more
    than it costs, so that it applies."""
    turn = f"turn {n}: " + "context " * 100
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": turn}]


# --- 1. a lone surrogate in a message that gets summarized ------------------------------------


def surrogate_turns(
    http: httpx.Client,
    proxy: ThreadedUvicorn,
    route: Route,
    conversation: str,
    *,
    between: Callable[[int], None] | None = None,
    first: str = f"FIRST {SURROGATE} msg",
) -> list[httpx.Response]:
    """The issue's conversation: user ``FIRST \\ud800 msg``, then ``ok`` / ``turn N`` up to 11."""
    history = [{"role": "user", "content": first}]
    responses = []
    for n in range(2, 12):
        response = post(http, proxy, route, raw(route.body(history)), conversation)
        responses.append(response)
        if between is not None:
            between(n - 1)
        add_turn(history, n)
    return responses


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_lone_surrogate_in_a_summarized_message_inline(
    route: Route, start: Callable[..., ThreadedUvicorn], mock: MockUpstream, http: httpx.Client
) -> None:
    proxy = start()
    responses = surrogate_turns(http, proxy, route, f"surrogate-inline-{route.label}")
    statuses = [r.status_code for r in responses]
    assert statuses == [200] * 10, [(r.status_code, r.text[:200]) for r in responses]
    outcomes = [r.headers["x-compaction"] for r in responses]
    assert "applied" in outcomes and "failed" not in outcomes, outcomes
    # The summarizer read the first message, the surrogate replaced, not left out.
    calls = summary_calls(mock)
    assert calls
    first = calls[0]["messages"][1]["content"]
    assert f"FIRST {REPLACEMENT} msg" in first, first
    # The provider got the summary, and the newest turns as the client sent them.
    last_prompt = mock.received[-1].body.decode("utf-8")
    assert "<agent_summary>" in last_prompt and "SUMMARY-" in last_prompt


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_lone_surrogate_in_a_summarized_message_ahead(
    route: Route, start: Callable[..., ThreadedUvicorn], mock: MockUpstream, http: httpx.Client
) -> None:
    proxy = start(mode="ahead")

    def settled(answered: int) -> None:
        settle(proxy.url, route=route.label, answered=answered)

    responses = surrogate_turns(
        http, proxy, route, f"surrogate-ahead-{route.label}", between=settled
    )
    assert [r.status_code for r in responses] == [200] * 10
    outcomes = [r.headers["x-compaction"] for r in responses]
    assert "applied" in outcomes, outcomes  # the background summary was made, and applied
    metrics = http.get(f"{proxy.url}/metrics").text
    assert 'proxy_summarizer_calls_total{mode="ahead",outcome="error"}' not in metrics


def admin(
    http: httpx.Client,
    proxy: ThreadedUvicorn,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    headers = {
        "authorization": f"Bearer {ADMIN}",
        "x-caller-authorization": f"Bearer {KEY}",
        **(headers or {}),
    }
    return http.request(method, f"{proxy.url}/admin{path}", headers=headers, content=content)


def assert_openai_error(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, (response.status_code, response.text)
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"}, error
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    return error["message"]


def test_admin_summary_edit_refuses_text_that_is_not_unicode(
    start: Callable[..., ThreadedUvicorn], http: httpx.Client
) -> None:
    proxy = start()
    responses = surrogate_turns(http, proxy, ROUTES["chat"], "edit-me", first="FIRST msg")
    assert "applied" in [r.headers["x-compaction"] for r in responses]
    before = admin(http, proxy, "GET", "/conversations/edit-me").json()
    path = "/conversations/edit-me/summary"
    bad = [
        # the PUT: valid JSON, a lone surrogate in the text
        ({"content-type": "application/json"}, raw({"summary": f"x {SURROGATE} y"}), "surrogate"),
        # the same surrogate as raw UTF-8-style bytes in a JSON string
        ({"content-type": "application/json"}, b'{"summary": "x \xed\xa0\x80 y"}', "surrogate"),
        # invalid UTF-8 sent as text
        ({"content-type": "text/plain"}, b"x \xff y", "UTF-8"),
        ({"content-type": "text/plain; charset=utf-8"}, b"x \xed\xa0\x80 y", "UTF-8"),
    ]
    for headers, body, named in bad:
        response = admin(http, proxy, "PUT", path, content=body, headers=headers)
        message = assert_openai_error(response, "summary")
        assert named in message, message
    after = admin(http, proxy, "GET", "/conversations/edit-me").json()
    assert after == before  # nothing stored
    # A good edit still goes through, and text/plain keeps its UTF-8 as sent.
    good = admin(
        http, proxy, "PUT", path, content="naïve ✓".encode(), headers={"content-type": "text/plain"}
    )
    assert good.status_code == 200, good.text
    assert good.json()["checkpoint"]["summary"] == "naïve ✓"


def test_summarizer_answer_with_a_lone_surrogate_is_stored_replaced(
    start: Callable[..., ThreadedUvicorn],
    mock: MockUpstream,
    providers: Providers,
    http: httpx.Client,
) -> None:
    """A provider may answer ``"\\ud800"`` in its JSON too: the summary is still stored, sent,
    shown by the admin API and exported, with U+FFFD in its place."""
    answer = providers.chat._summary

    def summary_with_surrogate(body: dict[str, Any]) -> Any:
        reply = answer(body)
        data = json.loads(reply.chunks[0])  # type: ignore[arg-type]
        data["choices"][0]["message"]["content"] += f" path /tmp/{SURROGATE}x"
        reply.chunks = [json.dumps(data).encode()]
        return reply

    providers.chat._summary = summary_with_surrogate  # type: ignore[method-assign]
    proxy = start()
    responses = surrogate_turns(http, proxy, ROUTES["chat"], "answer", first="FIRST msg")
    assert [r.status_code for r in responses] == [200] * 10
    assert "applied" in [r.headers["x-compaction"] for r in responses]
    sent = mock.received[-1].body.decode("utf-8")  # strict: the prompt is valid UTF-8
    assert f"/tmp/{REPLACEMENT}x" in json.loads(sent)["messages"][0]["content"]
    shown = admin(http, proxy, "GET", "/conversations/answer")
    assert shown.status_code == 200, shown.text
    assert f"/tmp/{REPLACEMENT}x" in shown.json()["checkpoints"][0]["summary"]


def test_admin_preview_of_messages_with_a_lone_surrogate(
    start: Callable[..., ThreadedUvicorn], http: httpx.Client
) -> None:
    proxy = start()
    history = [{"role": "user", "content": f"FIRST {SURROGATE} msg"}]
    body = raw({"model": "gpt-4o", "messages": history})
    response = admin(
        http, proxy, "POST", "/preview", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["messages"][0]["content"] == f"FIRST {SURROGATE} msg"  # as sent


def test_lone_surrogate_in_the_request_model_summarized_by_that_model(
    start: Callable[..., ThreadedUvicorn], http: httpx.Client, tmp_path: Path
) -> None:
    """``summarizer.model: $request``: the client's model name is sent by the summarizer and
    labels the checkpoint, which is stored, shown and exported (U+FFFD in the label)."""
    exported = tmp_path / "summaries.jsonl"
    export = {"jsonl": {"path": str(exported)}}
    proxy = start(summarizer={"model": "$request"}, export=export)
    route = Route(
        "/v1/chat/completions",
        "chat",
        lambda history: {"model": f"gpt-4o-{SURROGATE}", "messages": history},
        OPENAI_AUTH,
    )
    responses = surrogate_turns(http, proxy, route, "model-name", first="FIRST msg")
    assert [r.status_code for r in responses] == [200] * 10, [r.text[:200] for r in responses]
    assert "applied" in [r.headers["x-compaction"] for r in responses]
    shown = admin(http, proxy, "GET", "/conversations/model-name").json()
    assert shown["checkpoints"][0]["model"] == f"gpt-4o-{REPLACEMENT}"
    deadline = time.monotonic() + 10  # export runs after the response
    while not exported.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = exported.read_bytes().decode("utf-8").splitlines()  # strict UTF-8
    assert json.loads(lines[0])["model"] == f"gpt-4o-{REPLACEMENT}"


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_a_model_name_with_a_lone_surrogate_never_breaks_metrics(
    route: Route, start: Callable[..., ThreadedUvicorn], http: httpx.Client
) -> None:
    """The model name labels per-model gauges (window, token factor): one client's odd name
    must not make /metrics a 500 for every scrape after it."""
    proxy = start()
    body = route.body([{"role": "user", "content": "hello " * 50}])
    body["model"] = body["model"] + SURROGATE  # gpt-4o / claude-mock-1: a built-in window
    for _ in range(3):
        assert post(http, proxy, route, raw(body), "odd-model").status_code == 200
    metrics = http.get(f"{proxy.url}/metrics")
    assert metrics.status_code == 200, metrics.text[:300]
    assert f'model="{body["model"][:-1]}{REPLACEMENT}"' in metrics.text


# --- 2. a huge old message: the summary's calls are capped, the event loop stays free --------

# One summary reads at most 5400 tokens, in calls of 3000 - 200 (summary) - 1000 (prompt) = 1800.
CAPPED = {"max_input_tokens": 3000, "max_summary_tokens": 200, "max_summarized_tokens": 5400}
MAX_CALLS = 3
HUGE_BYTES = 2_000_000  # over 1 MiB: the request is parsed and planned off the event loop too


def huge_history() -> list[dict[str, str]]:
    """Six interactions, the first with a 2 MB message: the trigger (4) fires on this request,
    and the summary covers the first four, the huge one included."""
    words = " ".join(f"line {n} of the build log, step {n % 97} passed" for n in range(200))
    history = [{"role": "user", "content": (words + "\n") * (HUGE_BYTES // len(words))}]
    for n in range(2, 7):
        add_turn(history, n)
    return history


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_a_huge_old_message_is_summarized_in_a_bounded_number_of_calls(
    route: Route, start: Callable[..., ThreadedUvicorn], mock: MockUpstream, http: httpx.Client
) -> None:
    proxy = start(summarizer=CAPPED)
    response = post(http, proxy, route, raw(route.body(huge_history())), f"huge-{route.label}")
    assert response.status_code == 200, response.text[:300]
    assert response.headers["x-compaction"] == "applied"
    calls = [c["messages"][1]["content"] for c in summary_calls(mock)]
    assert 1 <= len(calls) <= MAX_CALLS, len(calls)
    # The newest of the summarized turns were read; the oldest part is said to be left out.
    assert "turn 4:" in calls[-1]
    assert "Left out of this summary: the oldest 1 message(s)" in calls[0]
    stored = admin(http, proxy, "GET", f"/conversations/huge-{route.label}").json()
    assert stored["checkpoints"][0]["summary"].startswith("[Left out of this summary")
    metrics = http.get(f"{proxy.url}/metrics").text
    omitted = [line for line in metrics.splitlines() if line.startswith("proxy_summarizer_omit")]
    assert omitted and float(omitted[0].split()[-1]) > 100_000, omitted


class GatedCounter(TokenCounter):
    """The real counter, except that the first text over ``size`` characters waits until the
    test releases it: CPU work that takes as long as the test wants."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.reached = threading.Event()
        self.released = threading.Event()

    def count_text(self, text: str, model: str) -> int:
        if len(text) > self.size and not self.reached.is_set():
            self.reached.set()
            self.released.wait(timeout=60)
        return super().count_text(text, model)


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_other_clients_are_answered_while_a_huge_message_is_read_for_its_summary(
    route: Route,
    mock: MockUpstream,
    start_proxy: Callable[..., ThreadedUvicorn],
    providers: Providers,
    http: httpx.Client,
) -> None:
    """While the summarizer counts the huge message (held until released), /healthz and a
    small chat of another client are answered: the counting is not on the event loop."""
    counter = GatedCounter(size=50_000)
    settings = text_config(mock.url, summarizer=CAPPED)
    proxy = start_proxy(settings, counter=counter)
    body = raw(route.body(huge_history()))
    result: list[httpx.Response] = []
    sender = threading.Thread(
        target=lambda: result.append(post(http, proxy, route, body, f"gated-{route.label}"))
    )
    sender.start()
    try:
        assert counter.reached.wait(timeout=30), "the summarizer never read the huge message"
        health = http.get(f"{proxy.url}/healthz", timeout=10)
        small = http.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer sk-other-client"},
            timeout=10,
        )
        # Answered before the huge request's summary could finish: its counting is still held.
        assert not counter.released.is_set() and not result
        assert health.status_code == 200 and small.status_code == 200, small.text
    finally:
        counter.released.set()
        sender.join(timeout=60)
    assert result and result[0].status_code == 200, result and result[0].text[:300]
    assert result[0].headers["x-compaction"] == "applied"


# --- 3. NaN and Infinity survive a rewrite ------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_nan_and_infinity_reach_the_provider_as_sent_when_compacted(
    route: Route, start: Callable[..., ThreadedUvicorn], mock: MockUpstream, http: httpx.Client
) -> None:
    """``json.dumps`` writes ``NaN``, ``Infinity`` and ``-Infinity`` (Python's JSON reads them
    back): a compacted body, re-encoded by the proxy, carries them exactly so, never ``null``."""
    proxy = start()
    extra = {"temperature": float("nan"), "x_bounds": [float("inf"), -float("inf"), 0.5]}
    history = [{"role": "user", "content": "FIRST msg"}]
    sent = []
    for n in range(2, 12):
        body = raw({**route.body(history), **extra})
        assert b'"temperature": NaN' in body and b"[Infinity, -Infinity, 0.5]" in body
        response = post(http, proxy, route, body, f"nan-{route.label}")
        assert response.status_code == 200, response.text
        sent.append((response.headers["x-compaction"], mock.received[-1].body))
        add_turn(history, n)
    rewritten = [body for outcome, body in sent if outcome == "applied"]
    assert rewritten, [outcome for outcome, _ in sent]
    for body in rewritten:
        assert b'"temperature":NaN' in body, body[:300]
        assert b'"x_bounds":[Infinity,-Infinity,0.5]' in body, body[:300]
