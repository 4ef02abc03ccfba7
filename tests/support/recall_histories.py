"""Histories the recall tests send on the three routes: a read_file call whose
result (``tool_output``) is old enough for the recall tests' CLEARING policy to stub, three more
turns, then ``question``."""

from __future__ import annotations

from typing import Any


def anthropic_history(tool_output: str, question: str) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.cfg"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": tool_output}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "read the config"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "read it"},
    ]
    for n in range(3):
        history += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return [*history, {"role": "user", "content": question}]


def responses_history(tool_output: str, question: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "read the config"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": '{"path": "a.cfg"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": tool_output},
        {"role": "assistant", "content": "read it"},
    ]
    for n in range(3):
        items += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return [*items, {"role": "user", "content": question}]


def chat_history(tool_output: str, question: str) -> list[dict[str, Any]]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.cfg"}'},
    }
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "read the config"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": tool_output},
        {"role": "assistant", "content": "read it"},
    ]
    for n in range(3):
        history += [
            {"role": "user", "content": f"question {n}"},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return [*history, {"role": "user", "content": question}]
