"""The truncation baseline: what a plain sliding window keeps within the same token budget.

The preamble (leading system/developer messages) stays; then the newest messages that fit,
walking backwards. A window never starts with tool results whose call it cut off. This is the
"no summarizer" answer the compaction must beat; it is not the proxy's ``trim`` strategy (which
cuts at interaction boundaries and is evaluated as a policy like any other).
"""

from __future__ import annotations

from typing import Any

from proxy.tools.evaluation.proxy_parts import TokenCounter

_PREAMBLE_ROLES = ("system", "developer")


def truncate(
    messages: list[dict[str, Any]], *, budget: int, counter: TokenCounter, model: str
) -> list[dict[str, Any]]:
    preamble = 0
    while preamble < len(messages) and messages[preamble].get("role") in _PREAMBLE_ROLES:
        preamble += 1
    counts = counter.per_message(messages, model)
    used = sum(counts[:preamble])
    start = len(messages)
    while start > preamble and used + counts[start - 1] <= budget:
        start -= 1
        used += counts[start]
    while start < len(messages) and messages[start].get("role") == "tool":
        start += 1  # an orphaned tool result: its call was cut off
    return [*messages[:preamble], *messages[start:]]
