"""Codex as the agents' own compaction tests and bench play it: a stateless Responses run
(``store: false``, the whole history as ``input``) through the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any

import openai

from tests.support.responses_provider import INSTRUCTIONS, TOOLS

MODEL = "gpt-5.1-codex"


def codex_session(sdk: openai.OpenAI, rounds: int) -> list[dict[str, Any]]:
    """A stateless Codex-like run through the proxy: the task, then ``rounds`` tool rounds."""
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "AGENT: fix the failing tests"}],
        }
    ]
    for n in range(rounds):
        reply = sdk.responses.create(
            model=MODEL, instructions=INSTRUCTIONS, input=items, tools=TOOLS, store=False
        )
        for item in reply.output:
            items.append(item.model_dump(exclude_none=True, warnings=False))
            if item.type == "function_call":
                output = "".join(f"FAILED test_{n}_{i}: assert {i} == {i + 1}\n" for i in range(15))
                items.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
    return items
