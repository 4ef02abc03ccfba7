"""A scripted chat provider whose model uses the recall tool (tests/support/recall_model.py).

On top of the compaction tests' ``Provider`` (summaries, ``TOOL`` turns that call read_file): a
user message ``RECALL <wanted>`` is answered by ``recall_step``, plain or streamed. ``force_ids``
makes the model call recall with those ids whatever it sees (a handle of another conversation).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.mock_upstream import Reply, completion, json_reply, sse_chunks, sse_reply
from tests.support.provider import SYSTEM, Provider, take_turn
from tests.support.recall_model import (
    TOOL,
    Step,
    chat_calls,
    chat_tool_stream,
    declares,
    recall_step,
)

_ASK = re.compile(r"^RECALL (\S+)")
# Old tool results stubbed (two interactions back), never a summary: what the recall tests use.
CLEARING = {
    "strategy": "summarize",
    "trigger": {"context_fraction": 0, "interactions": 100},
    "keep": {"interactions": 2},
    "clear_tool_results": {"older_than_interactions": 2},
}


class RecallProvider(Provider):
    force_ids: tuple[str, ...] = ()

    def chat(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        question = next((m for m in reversed(messages) if m["role"] == "user"), None)
        found = _ASK.match(str(question.get("content"))) if question else None
        if found is None or body.get("model") == "mock-summarizer":
            return super().chat(body)
        offered = declares(body.get("tools")) and body.get("tool_choice") != "none"
        step = recall_step(
            messages, found.group(1), tool_offered=offered, question=question["content"]
        )
        if self.force_ids and offered and messages[-1]["role"] == "user":
            step = Step(ids=self.force_ids)
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        if step.text is not None:
            if body.get("stream"):
                return sse_reply(
                    with_usage_chunk(sse_chunks([step.text[:3], step.text[3:]]), usage)
                )
            return json_reply(completion(step.text))
        calls = chat_calls(step)
        if body.get("stream"):
            return sse_reply(with_usage_chunk(chat_tool_stream(calls), usage))
        return json_reply(completion("", tool_calls=calls))


def cleared_history(client: Any, tool_output: str) -> list[dict[str, Any]]:
    """A chat history driven through the proxy whose read_file result (``tool_output``) the
    CLEARING policy stubs: a TOOL turn, then three questions."""
    history = [SYSTEM]
    take_turn(client, history, "Step 0 TOOL", tool_output=tool_output)
    for turn in range(1, 4):
        take_turn(client, history, f"Question {turn}: and then?")
    return history


def recall_results(body: dict[str, Any]) -> list[str]:
    """The recall tool results a request carries (the proxy's answers to the model's calls)."""
    ids = {
        c["id"]
        for m in body["messages"]
        for c in m.get("tool_calls") or ()
        if c["function"]["name"] == TOOL
    }
    return [
        m["content"]
        for m in body["messages"]
        if m.get("role") == "tool" and m.get("tool_call_id") in ids
    ]


def with_usage_chunk(chunks: list, usage: bool = True) -> list:
    """A stream with, when the request asked for it, its usage chunk before ``[DONE]``."""
    if not usage:
        return chunks
    tally = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    event = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": tally,
    }
    return [*chunks[:-1], f"data: {json.dumps(event)}\n\n".encode(), chunks[-1]]
