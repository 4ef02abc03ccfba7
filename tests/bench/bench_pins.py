"""What pins cost the planner: ``plan()`` of one long history with and without ``pin:``.

Run: .venv/bin/python -m tests.bench.bench_pins [--messages 1000] [--repeat 30]

The history is a coding agent's: one system prompt, then interactions of a user message and
three tool rounds (an assistant call and its result, ~150 tokens each). The planner runs with the
same summarize policy (a trigger that fires, keep 2 interactions, a prior summary applied), once
with no pins (the baseline, measured in the same run) and once per pin list. Printed: the median
time of one ``plan()`` and its ratio to the baseline. Token counts are warmed first (the proxy
caches them per message, and a request looks each message up once), so what is measured is the
planning, not tiktoken.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken"))

from proxy.core.planner import PriorSummary, plan  # noqa: E402
from proxy.core.policy import KeepSettings, PolicySettings, TriggerSettings  # noqa: E402
from proxy.core.tokens import TokenCounter  # noqa: E402
from tests.support.messages import assistant, system, tool, user  # noqa: E402

PIN_LISTS: dict[str, tuple[str, ...]] = {
    "no pins (baseline)": (),
    "role == user": ('role == "user"',),
    "3 expressions": ('role == "user"', 'contains("#keep")', 'tool == "read_spec"'),
}


def history(size: int) -> list[dict[str, Any]]:
    messages = [system("You are a coding agent.")]
    n = 0
    while len(messages) < size:
        messages.append(user(f"task {n}: fix module {n}" + (" #keep" if n % 7 == 0 else "")))
        for r in range(3):
            call = f"c{n}_{r}"
            messages.append(assistant(None, (call, "read_file", f'{{"path": "m{n}_{r}.py"}}')))
            messages.append(tool(call, f"contents of m{n}_{r}.py\n" + "x = 1\n" * 60))
        n += 1
    return messages


def timed(
    messages: list[dict[str, Any]], pins: tuple[str, ...], counter: TokenCounter, repeat: int
) -> float:
    policy = PolicySettings(
        trigger=TriggerSettings(context_fraction=0, messages=10),
        keep=KeepSettings(interactions=2),
        pin=pins,
    )
    prior = PriorSummary("S", len(messages) // 2 // 7 * 7 + 1, "cp", active=True)
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        plan(messages, policy, model="gpt-4o", counter=counter, model_info=None, prior=prior)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    counter = TokenCounter()
    messages = history(args.messages)
    with counter.facts.request() as facts:  # as a request plans: its view of the fact cache
        counter = counter.with_facts(facts)
        counter.per_message(messages, "gpt-4o")  # warm the counts
        baseline = timed(messages, (), counter, args.repeat)
        print(f"{len(messages)} messages, median of {args.repeat} plan() calls")
        for label, pins in PIN_LISTS.items():
            seconds = timed(messages, pins, counter, args.repeat)
            print(f"  {label:22} {seconds * 1000:7.2f} ms   x{seconds / baseline:.2f}")


if __name__ == "__main__":
    main()
