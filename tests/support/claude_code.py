"""Claude Code as the agents' own compaction tests and bench play it: a coding session through
the ``anthropic`` SDK, then its summary request as Claude Code 2.1.197 sends it (the whole
history and one more user message: a text-only preamble and its summary prompt)."""

from __future__ import annotations

from typing import Any

import anthropic

KEY = "sk-ant-caller-one"
MODEL = "claude-mock-1"
SYSTEM = [{"type": "text", "text": "You are a careful coding agent."}]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
# Claude Code 2.1.197's compaction request ends so (its text-only preamble, then the prompt).
NO_TOOLS = (
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n"
    "- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or ANY other tool.\n"
)
PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions.\nThis summary should "
    "be thorough ...\n<summary>\n1. Primary Request and Intent:\n   [Detailed description]\n"
    "</summary>\n</example>\n\nPlease provide your summary based on the conversation so far."
)
RECENT_PROMPT = (
    "Your task is to create a detailed summary of the RECENT portion of the conversation - the "
    "messages that follow earlier retained context."
)


def run_session(sdk: anthropic.Anthropic, steps: int) -> list[dict[str, Any]]:
    """A coding session of ``steps`` user turns of two tool rounds each; its history."""
    history: list[dict[str, Any]] = []
    for n in range(steps):
        history.append({"role": "user", "content": [{"type": "text", "text": f"Step {n} TOOL"}]})
        for done in (1, 2):
            reply = sdk.messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=history, tools=TOOLS
            )
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            if reply.stop_reason != "tool_use":
                break
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": b.id,
                    "content": "".join(f"\nline {i}: x = {i * n}" for i in range(12))
                    + (" LAST" if done == 2 else ""),
                }
                for b in reply.content
                if b.type == "tool_use"
            ]
            history.append({"role": "user", "content": results})
        if history[-1]["role"] == "user":  # the round after LAST answers in text
            reply = sdk.messages.create(
                model=MODEL, max_tokens=256, system=SYSTEM, messages=history, tools=TOOLS
            )
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
    return history


def compaction_request(history: list[dict[str, Any]], prompt: str = PROMPT) -> list[dict[str, Any]]:
    return [*history, {"role": "user", "content": [{"type": "text", "text": NO_TOOLS + prompt}]}]
