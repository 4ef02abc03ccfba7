"""Benchmarks of the compaction core. Run: .venv/bin/python -m tests.bench.bench_core

Prints, for a 200-interaction (~150k-token) coding-agent conversation:
- the first (cold) and second (warm, new dict objects as in a new request) token count, and
  their ratio (goal >= 20x);
- the plan time with a warm cache (goal < 5 ms);
- the same for a ~150k-token single-task agent run: one user message, then tool
  rounds, cut between rounds (goal < 5 ms).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from proxy.core.planner import Plan, PriorSummary, plan
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.core.tokens import TokenCounter

TIKTOKEN_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "tiktoken"
MODEL = "gpt-4o"


def conversation(interactions: int = 200) -> list[dict[str, Any]]:
    """A coding agent's history: each interaction a request, a tool call, its output, a reply."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(interactions):
        messages += [
            {"role": "user", "content": f"Step {i}: refactor module_{i}.py and run its tests."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": "run",
                            "arguments": f'{{"cmd": "pytest tests/t_{i}.py"}}',
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": "".join(
                    f"tests/t_{i}.py::case_{j} PASSED [{j}%] duration {j * 7}ms\n"
                    for j in range(30)
                ),
            },
            {"role": "assistant", "content": f"Module {i} refactored; all 30 tests pass. " * 8},
        ]
    return messages


def agent_run(rounds: int = 200) -> list[dict[str, Any]]:
    """A single-task agent run: one user message, then ``rounds`` rounds of a call and its output."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests in this repository."},
    ]
    for i in range(rounds):
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "run", "arguments": f'{{"cmd": "pytest -k t{i}"}}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": "".join(
                    f"tests/t_{i}.py::case_{j} FAILED [{j}%] expected {j}, got {j + i}\n"
                    for j in range(35)
                ),
            },
        ]
    return messages


def fresh(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """New dicts and strings with the same content, as a newly parsed request would have."""
    return [
        {k: (v + " ")[:-1] if isinstance(v, str) else v for k, v in m.items()} for m in messages
    ]


def main() -> None:
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_DIR))
    counter = TokenCounter()
    counter.count_text("warm up the encoding", MODEL)
    messages = conversation()

    started = time.perf_counter()
    tokens = counter.count_messages(messages, MODEL)
    cold = time.perf_counter() - started
    again = fresh(messages)
    started = time.perf_counter()
    assert counter.count_messages(again, MODEL) == tokens
    warm = time.perf_counter() - started
    print(f"conversation: {len(messages)} messages, 200 interactions, {tokens} tokens")
    print(f"count, first:  {cold * 1000:8.2f} ms")
    print(f"count, second: {warm * 1000:8.2f} ms   ratio {cold / warm:5.1f}x (goal >= 20x)")

    policy = PolicySettings()  # summarize at 80% of the window, keep 2 interactions
    info = ModelInfo(context_window=128_000)
    prior = PriorSummary("Earlier steps refactored modules 0-149.", covered=601, checkpoint_id="c")
    for label, state in (("no checkpoint", None), ("with checkpoint", prior)):
        median, worst, result = time_plan(messages, policy, counter, info, state)
        print(
            f"plan, warm cache, {label:15}: median {median:6.2f} ms, max {worst:6.2f} ms"
            f" (goal < 5 ms); fired={result.fired}"
            f" tokens {result.tokens_before} -> {result.tokens_after}"
        )

    run = agent_run()
    tokens = counter.count_messages(run, MODEL)
    first = plan(fresh(run), policy, model=MODEL, counter=counter, model_info=info, prior=None)
    wanted = first.summary_request
    assert wanted is not None and first.task is None
    covered = PriorSummary("Rounds so far: tests fixed one by one.", wanted.covered, "c", True)
    print(f"single-task agent run: {len(run)} messages, 1 interaction, {tokens} tokens")
    for label, state in (("no checkpoint", None), ("with checkpoint", covered)):
        median, worst, result = time_plan(run, policy, counter, info, state)
        print(
            f"plan, agent run, {label:15}: median {median:6.2f} ms, max {worst:6.2f} ms"
            f" (goal < 5 ms); fired={result.fired} cut at message {wanted.covered} (a round"
            f" boundary); tokens {result.tokens_before} -> {result.tokens_after}"
        )


def time_plan(
    messages: list[dict[str, Any]],
    policy: PolicySettings,
    counter: TokenCounter,
    info: ModelInfo,
    prior: PriorSummary | None,
) -> tuple[float, float, Plan]:
    """Median and worst plan time in ms over 50 new requests (warm cache), and the last plan."""
    times = []
    for _ in range(50):
        request = fresh(messages)
        started = time.perf_counter()
        result = plan(request, policy, model=MODEL, counter=counter, model_info=info, prior=prior)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, max(times) * 1000, result


if __name__ == "__main__":
    main()
