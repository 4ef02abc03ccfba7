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


# Codex 0.171's local compaction prompt (its binary's text), sent as the last user message.
COMPACT_PROMPT = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another "
    "LLM that will resume the task.\n\nInclude:\n- Current progress and key decisions made\n"
    "- What remains to be done (clear next steps)\n\nBe concise, structured, and focused on "
    "helping the next LLM seamlessly continue the work."
)


def compaction_prompt(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as Codex sends it to compact locally: the prompt as one more user message."""
    asked = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": COMPACT_PROMPT}],
    }
    return [*items, asked]
