"""Agent runs compact too: one user message, then dozens of rounds of tool calls and
tool results, through a real proxy with the official openai client, against a mock provider that
plays the model (it keeps calling ``run_tests``) and, where asked, has a token window.

What a user notices: the prompt stops growing, the summarizer is called, the task is in every
prompt verbatim, no call is separated from its result, ``X-Compaction`` says what happened, and
a prompt over the window is rescued instead of failing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.support.clients import admin_get, openai_client
from tests.support.config import AGENT_RUN, summarizing
from tests.support.provider import SYSTEM, Provider, tool_output
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

# The recall tool as chat completions carries it, in tiktoken o200k tokens (the proxy counts 160).
RECALL_TOOL_TOKENS = 160
TASK = {"role": "user", "content": "AGENT: fix the failing tests"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}},
    }
]


def run_agent(
    client: openai.OpenAI,
    rounds: int,
    history: list[dict[str, Any]] | None = None,
    *,
    between: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Play ``rounds`` rounds of the agent loop; returns the history and each response's headers.
    ``between`` runs after each round (the tool running, the model thinking)."""
    history = history if history is not None else [SYSTEM, TASK]
    seen = []
    for _ in range(rounds):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history, tools=TOOLS
        )
        seen.append(dict(raw.headers))
        message = raw.parse().choices[0].message
        history.append(message.model_dump(exclude_none=True))
        assert message.tool_calls, "the mock plays an agent that keeps calling tools"
        for call in message.tool_calls:
            history.append(
                {"role": "tool", "tool_call_id": call.id, "content": tool_output(len(history))}
            )
        if between is not None:
            between()
    return history, seen


def background_idle(server: ThreadedUvicorn) -> Callable[[], None]:
    """Waits (bounded) until the proxy is done with every chat request answered so far and has no
    summary queued or running: an agent whose rounds take longer than a summary, whatever the
    load on the test machine (tests/support/settle.py)."""
    answered = [0]

    def wait() -> None:
        answered[0] += 1
        settle(server.url, route="chat", answered=answered[0])

    return wait


def check_agent_prompt(sent: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    """The preamble, at most one summary right after it, the task verbatim, then a verbatim run
    of the client's history starting at a round boundary and ending with a whole round."""
    assert sent[0] == SYSTEM
    summaries = [i for i, m in enumerate(sent) if "<agent_summary>" in str(m.get("content"))]
    assert summaries in ([], [1]), summaries
    body = sent[2:] if summaries else sent[1:]
    assert body[0] == TASK, "the task is never summarized away"
    rest = body[1:]
    if not rest:
        return
    starts = [j for j in range(1, len(history)) if history[j : j + len(rest)] == rest]
    assert starts, "the kept rounds are not a verbatim slice of the client's history"
    j = starts[-1]
    assert history[j - 1]["role"] in ("tool", "user"), "cut inside a tool round"
    assert rest[-1]["role"] == "tool" and rest[0]["role"] == "assistant"


def chat_prompts(provider: Provider) -> list[list[dict[str, Any]]]:
    return [body["messages"] for body in provider.chat_requests()]


@pytest.mark.parametrize("mode", ["inline", "ahead"])
def test_one_task_with_many_tool_rounds_is_compacted(
    mock,
    start_proxy,
    store_url: str,
    mode: str,
) -> None:
    """The issue's reproduction: input_tokens 3000, keep.tokens 1500, one task, 35 rounds. It
    used to grow to 14k tokens with every response ``skipped`` and no summarizer call."""
    provider = Provider(mock)
    provider.window_tokens = 1_000_000  # only to count what the provider receives
    server = start_proxy(summarizing(mock.url, store_url, policy=AGENT_RUN, mode=mode))
    # Ahead of time, a prompt outgrows the trigger only while its summary is being made; the
    # agent here takes longer per round than a summary, so the bound below holds on any machine.
    between = background_idle(server) if mode == "ahead" else None
    history, seen = run_agent(openai_client(server, "agent-1"), 35, between=between)

    outcomes = [h["x-compaction"] for h in seen]
    assert "applied" in outcomes and "failed" not in outcomes and "blocked" not in outcomes
    assert provider.summaries >= 1
    for prompt in chat_prompts(provider):
        check_agent_prompt(prompt, history)
    assert provider.prompt_tokens[0] < 300
    # inline never sends a prompt over the trigger; ahead may, while the summary that brings it
    # back is made after the response (no window is known here, so nothing waits for it)
    # (the recall tool aside: once offered it stays, and may pass the trigger by its own size,
    # so that it never comes and goes as a prompt grows towards the trigger)
    if mode == "inline":
        assert max(provider.prompt_tokens) <= 3000 + RECALL_TOOL_TOKENS
    assert max(provider.prompt_tokens) < 3000 + 1200
    # What the client holds: many times the trigger (17.2k by tiktoken; 14.3k by the approximate
    # count a machine without tiktoken's files makes), while no prompt went over it.
    assert int(seen[-1]["x-compaction-tokens-before"]) > 4 * 3000
    # the summarizer saw the task, and later summaries extend the earlier ones
    first = json.dumps(provider.summary_requests()[0]["messages"])
    assert "fix the failing tests" in first
    # what the store holds: checkpoints that end between rounds of the one interaction
    record = admin_get(server, "/conversations/agent-1").json()
    covered = [c["covered_messages"] for c in record["checkpoints"]]
    assert covered and all(history[c - 1]["role"] == "tool" for c in covered)
    # skipped only when nothing was due
    assert all(
        int(h["x-compaction-tokens-before"]) <= 3000 for h in seen if h["x-compaction"] == "skipped"
    )


def test_forks_of_a_partly_summarized_task(mock, start_proxy, store_url: str) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, store_url, policy=AGENT_RUN))
    client = openai_client(server, "agent-fork")
    history, _ = run_agent(client, 30)
    record = admin_get(server, "/conversations/agent-fork").json()
    deepest = max(c["covered_messages"] for c in record["checkpoints"])
    summaries = provider.summaries
    assert deepest > 2 and summaries >= 1

    # A fork that keeps the summarized rounds and replaces the newest one reuses the summary.
    fork = json.loads(json.dumps(history[:-2]))
    fork, _ = run_agent(client, 1, fork)
    sent = chat_prompts(provider)[-1]
    assert "<agent_summary>" in sent[1]["content"]
    check_agent_prompt(sent, fork)

    # An edited round inside the summarized part never gets a summary of what it does not have.
    edited = json.loads(json.dumps(history))
    edited[4]["content"] = "a different test run"
    before = len(provider.chat_requests())
    run_agent(client, 1, edited)
    sent = provider.chat_requests()[before]["messages"]
    stored = [c["summary"] for c in record["checkpoints"]]
    # (the texts themselves: a summary holds newlines, which json.dumps would escape)
    assert not any(s in str(m.get("content")) for m in sent for s in stored)
    assert sent[1] == TASK or "<agent_summary>" in sent[1]["content"]


@pytest.mark.parametrize("known_window", [True, False])
def test_a_single_task_over_the_window_never_reaches_the_client_as_an_error(
    mock, start_proxy, known_window: bool
) -> None:
    """A 4k-window model: with its window in the config the trigger compacts before the
    provider refuses; with the window unknown (no trigger on), the overflow is rescued."""
    provider = Provider(mock)
    provider.window_tokens = 4000
    if known_window:
        settings = summarizing(
            mock.url,
            policy={"strategy": "summarize", "keep": {"interactions": 2}},
            models={"gpt-4o*": {"context_window": 4000}},
        )
    else:
        settings = summarizing(
            mock.url, policy={"strategy": "summarize", "trigger": {"context_fraction": 0}}
        )
    server = start_proxy(settings)
    history, seen = run_agent(openai_client(server, "agent-window"), 30)

    assert sum(provider.prompt_tokens) > 3 * 4000  # the run is far longer than the window
    for prompt in chat_prompts(provider):
        if provider.prompt_tokens[chat_prompts(provider).index(prompt)] <= 4000:
            check_agent_prompt(prompt, history)
    if known_window:
        assert provider.overflows == 0
        assert max(provider.prompt_tokens) <= 4000
    else:
        retried = [h for h in seen if h.get("x-compaction-retried") == "context_length_exceeded"]
        assert provider.overflows >= 1 and len(retried) == provider.overflows
        assert provider.summaries >= 1


def test_a_trigger_with_nothing_to_cut_says_blocked_and_is_counted(mock, start_proxy) -> None:
    Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=AGENT_RUN))
    huge = {"role": "user", "content": "Please review this log: " + "error line " * 2000}
    raw = openai_client(server, "blocked-1").chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[SYSTEM, huge]
    )
    assert raw.headers["x-compaction"] == "blocked"
    metrics = httpx.get(f"{server.url}/metrics").text
    blocked = 'proxy_compactions_total{applied="none",outcome="blocked",strategy="summarize"} 1.0'
    assert blocked in metrics
    assert "x-compaction-applied" not in raw.headers
