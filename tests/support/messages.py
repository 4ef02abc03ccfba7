"""Small factories for chat messages, in the shape clients send them."""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def system(text: str = "You are a helpful assistant.") -> Message:
    return {"role": "system", "content": text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, *calls: tuple[str, str, str]) -> Message:
    """An assistant message; each call is (id, function name, arguments)."""
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ]
    return message


def tool(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def chat(turns: int, *, words: int = 20, preamble: bool = True) -> list[Message]:
    """A plain chat of ``turns`` interactions (user question, assistant answer)."""
    messages = [system()] if preamble else []
    for i in range(turns):
        messages += [user(f"question {i} " + "word " * words), assistant(f"answer {i} " * words)]
    return messages
