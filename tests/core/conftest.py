"""Small factories for chat messages, a shared token counter and a fake summarizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from proxy.core.tokens import TokenCounter

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


@pytest.fixture(scope="session")
def counter(tiktoken_cache_dir: Path) -> TokenCounter:
    """A real tiktoken counter, shared so its cache is warm across tests."""
    return TokenCounter()


class FakeSummarizer:
    """Records what it was asked and answers with a fixed, recognisable summary."""

    def __init__(self, text: str = "SUMMARY") -> None:
        self.text = text
        self.calls: list[dict[str, Any]] = []

    async def summarize(
        self, transcript: Sequence[Message], *, previous: str | None, model: str, max_tokens: int
    ) -> str:
        self.calls.append({"transcript": list(transcript), "previous": previous, "model": model})
        return f"{previous} + {self.text}" if previous else self.text
