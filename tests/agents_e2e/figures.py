"""The figures of one agent session, from what the proxy received (``Record``) and what the
strict provider saw (``Seen``), joined by the harness's sequence number.

A session is cut into conversations by route, model and the names of the tools offered: an
agent's side calls (Claude Code's title and quota checks on a small model, opencode's title)
offer other tools or none, and the proxy keeps them apart too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from tests.agents_e2e.provider import Seen
from tests.agents_e2e.recording import Record


@dataclass
class Figures:
    requests: int = 0
    summaries_made: int = 0
    requests_with_summary: int = 0
    summaries_dropped: int = 0
    recall_rounds: int = 0
    tokens_before_last: int = 0
    tokens_after_last: int = 0
    broken_histories: int = 0  # the strict provider's 400s
    proxy_4xx: int = 0  # the proxy's own refusals
    proxy_5xx: int = 0
    fixed_prompt_tokens: int = 0  # system + tools of the main conversation's first request

    def line(self) -> str:
        return "  ".join(f"{k}={v}" for k, v in asdict(self).items())


def tool_names(body: Any) -> tuple[str, ...]:
    tools = body.get("tools") if isinstance(body, dict) else None
    names = [
        t.get("name") or (t.get("function") or {}).get("name") or t.get("type") for t in tools or []
    ]
    return tuple(sorted(str(n) for n in names))


def conversation_key(record: Record) -> tuple[Any, ...]:
    body = record.body if isinstance(record.body, dict) else {}
    return (record.path, body.get("model"), tool_names(body))


def conversations(records: Iterable[Record]) -> list[list[Record]]:
    """The session's conversations, the main one (most requests) first."""
    groups: dict[tuple[Any, ...], list[Record]] = defaultdict(list)
    for record in records:
        if record.compacted_route:
            groups[conversation_key(record)].append(record)
    return sorted(groups.values(), key=len, reverse=True)


def fixed_prompt(body: dict[str, Any]) -> str:
    """The part of a request every turn repeats: system text and tool schemas."""
    parts: list[str] = []
    system = body.get("system") or body.get("instructions")
    if system:
        parts.append(system if isinstance(system, str) else json.dumps(system))
    for item in body.get("messages") or body.get("input") or []:
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            parts.append(json.dumps(item.get("content")))
    if body.get("tools"):
        parts.append(json.dumps(body["tools"]))
    return "\n".join(parts)


def count_tokens(text: str) -> int:
    import tiktoken

    return len(tiktoken.get_encoding("o200k_base").encode(text, disallowed_special=()))


def measure(records: list[Record], seen: list[Seen]) -> Figures:
    by_seq: dict[int, list[Seen]] = defaultdict(list)
    for entry in seen:
        if entry.seq is not None:
            by_seq[entry.seq].append(entry)
    figures = Figures(
        requests=sum(1 for r in records if r.compacted_route),
        summaries_made=sum(1 for s in seen if s.summarizer),
        recall_rounds=sum(1 for s in seen if s.recall),
        broken_histories=sum(1 for s in seen if s.status == 400),
        proxy_5xx=sum(1 for r in records if r.status >= 500),
        proxy_4xx=sum(
            1
            for r in records
            if r.compacted_route
            and 400 <= r.status < 500
            and not any(s.status == 400 for s in by_seq[r.seq])
        ),
    )
    groups = conversations(records)
    for group in groups:
        in_use = False
        for record in group:
            carries = any(s.summary for s in by_seq[record.seq])
            figures.requests_with_summary += carries
            figures.summaries_dropped += in_use and not carries
            in_use = in_use or carries
    if groups:
        main = groups[0]
        figures.tokens_before_last = int(main[-1].answer.get("x-compaction-tokens-before") or 0)
        figures.tokens_after_last = int(main[-1].answer.get("x-compaction-tokens-after") or 0)
        figures.fixed_prompt_tokens = count_tokens(fixed_prompt(main[0].body))
    return figures
