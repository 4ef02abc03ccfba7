"""Tool-outcome triggers in one long agent run: ``on_tool_success`` /
``on_tool_error`` fire on the tool results new in a request, not on every result of the task.

An agent run is one interaction: the task, then every round since. Looking at "the last
interaction" made one passing test run fire the trigger on every later turn of the run (one
summary per turn); the user expects one summary per new success (or failure).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider

TASK = {"role": "user", "content": "AGENT: make the test suite pass"}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}},
    }
]
ROUNDS = 12
ODD_ROUND = 4  # the one round whose result differs from all the others


def runner_log(n: int, verdict: str) -> str:
    """A test run's log (~400 tokens) led by its verdict line."""
    return f"{verdict}\n" + "".join(
        f"tests/test_mod_{n}.py::test_case_{i} ran in {i + n}ms, log line {i}\n" for i in range(25)
    )


def run_agent(client: Any, verdicts: list[str]) -> list[dict[str, str]]:
    """The agent loop: the mock calls run_tests each round; round k's result leads with
    ``verdicts[k]``. Returns each response's headers."""
    history = [SYSTEM, TASK]
    seen = []
    for n, verdict in enumerate(verdicts):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history, tools=TOOLS
        )
        seen.append(dict(raw.headers))
        message = raw.parse().choices[0].message
        assert message.tool_calls, "the mock plays an agent that keeps calling tools"
        history.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            history.append(
                {"role": "tool", "tool_call_id": call.id, "content": runner_log(n, verdict)}
            )
    return seen


@pytest.mark.parametrize(
    ("trigger", "usual", "odd"),
    [
        ("on_tool_success", "Error: 3 tests failed", "All 40 tests passed"),
        ("on_tool_error", "All 40 tests passed", "Error: 3 tests failed"),
    ],
)
def test_one_new_tool_outcome_asks_for_one_summary(
    mock, start_proxy, trigger: str, usual: str, odd: str
) -> None:
    """The issue's reproduction, shortened: keep by tokens, a tool trigger, one run. The result
    of round ODD_ROUND is the only one the trigger names; it arrives in request ODD_ROUND + 1."""
    provider = Provider(mock)
    policy = {
        "strategy": "summarize",
        "mode": "inline",
        # Not weighed by price: what is tested is that one outcome fires once (the price
        # decision, which would hold back a cut this small, is tests/compaction/test_price_trigger).
        "trigger": {"context_fraction": 0, trigger: ["run_tests"], "pays": False},
        "keep": {"tokens": 1000},
    }
    server = start_proxy(summarizing(mock.url, policy=policy))
    verdicts = [odd if n == ODD_ROUND else usual for n in range(ROUNDS)]
    seen = run_agent(openai_client(server, "agent-run"), verdicts)

    outcomes = [h["x-compaction"] for h in seen]
    arrives = ODD_ROUND + 1
    # A success seen rounds ago once fired again on every request from `arrives` on (7
    # summaries here): one agent run is one interaction, its success fires once.
    assert provider.summaries == 1, outcomes
    assert outcomes[:arrives] == ["skipped"] * arrives
    # The summary the trigger caused stays applied (no flapping) and is the same checkpoint.
    assert outcomes[arrives:] == ["applied"] * (ROUNDS - arrives)
    checkpoints = {h["x-compaction-checkpoint"] for h in seen[arrives:]}
    assert len(checkpoints) == 1 and "" not in checkpoints
    # What the provider received from then on starts with that one summary, the task verbatim.
    for body in provider.chat_requests()[arrives:]:
        sent = body["messages"]
        assert sent[1]["content"].startswith("<agent_summary>")
        assert "SUMMARY-1" in sent[1]["content"]
        assert sent[2] == TASK
