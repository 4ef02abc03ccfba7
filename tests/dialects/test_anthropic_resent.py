"""An Anthropic history sent again is translated only past what the last body's items were made
into: the neutral messages are those a fresh translation gives, and the carried ones are the
very objects made last time (so what reads them after knows them by identity)."""

from __future__ import annotations

import json

import orjson
import pytest

from proxy.core import resent
from proxy.dialects.anthropic_messages import MESSAGES


@pytest.fixture(autouse=True)
def follow_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resent, "FOLLOW_BYTES", 0)


def _round(i: int) -> list[dict]:
    call = {"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"path": f"f{i}"}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"line {i}"}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"reading {i}"}, call]},
        {"role": "user", "content": [result, {"type": "text", "text": f"note {i}"}]},
    ]


def _body(rounds: int, mark: bool = True) -> dict:
    messages = [{"role": "user", "content": "fix the bug"}]
    for i in range(rounds):
        messages += _round(i)
    if mark:  # Claude Code marks the newest message's last block for the cache
        newest = messages[-1]
        blocks = [
            *newest["content"][:-1],
            {**newest["content"][-1], "cache_control": {"type": "ephemeral"}},
        ]
        messages[-1] = {**newest, "content": blocks}
    return {"model": "claude-x", "max_tokens": 100, "system": "Be careful.", "messages": messages}


def test_a_history_sent_again_is_translated_only_past_what_is_new() -> None:
    first, then = orjson.dumps(_body(6)), orjson.dumps(_body(8))
    parsed = MESSAGES.parse(first, None, True)
    made = MESSAGES.conversation(parsed.value, parsed=parsed)
    again = MESSAGES.parse(then, parsed, True)
    assert again.reused == 12  # every item but the one that lost its cache mark
    assert len(again.translated) == 12  # what the last body's taken items were made into
    neutral = MESSAGES.conversation(again.value, parsed=again)
    assert len(again.translated) == len(again.value["messages"])  # kept for the next one
    assert neutral == MESSAGES.conversation(json.loads(then))  # a fresh translation's
    carried = 1 + sum(len(m) for m in again.translated[:12])  # the system message first
    assert all(a is b for a, b in zip(neutral.messages[1:carried], made.messages[1:], strict=False))
    assert neutral.messages[carried] is not made.messages[carried]  # the changed one: made again
