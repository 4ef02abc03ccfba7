"""A model that uses the proxy's recall tool, for the recall tests and the evaluation's mock.

``recall_step`` decides one reply from the chat-shaped history a request carries: when what the
question looks for (``wanted``) is visible, answer with the line holding it; otherwise, when the
request declares the recall tool, call it for every recall id in sight that was not recalled yet
(the stubs' "recall id rX", the summary index's "- rX:" lines); otherwise say it does not know.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.support.mock_upstream import chunk_event

TOOL = "context_recall"
HANDLE = re.compile(r"(?:recall id |^- )(r[a-z2-7]{10})\b", re.M)
DONT_KNOW = "I don't know."


@dataclass(frozen=True)
class Step:
    """Either ``text`` to answer with, or the recall ``ids`` to call (with ``query``)."""

    text: str | None = None
    ids: tuple[str, ...] = ()
    query: str | None = None


def flat(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            flat(p.get("text", p.get("content")) if isinstance(p, dict) else p) for p in content
        )
    return "" if content is None else json.dumps(content)


def declares(tools: object, name: str = TOOL) -> bool:
    for tool in tools if isinstance(tools, list) else ():
        if tool.get("name") == name or (tool.get("function") or {}).get("name") == name:
            return True
    return False


def recall_step(
    history: list[dict[str, Any]],
    wanted: str,
    *,
    tool_offered: bool,
    question: str = "",
    query: str | None = None,
) -> Step:
    """The reply to ``question`` looking for ``wanted`` (see the module docstring)."""
    texts = [t for m in history if (t := flat(m.get("content"))) != question]
    for text in texts:
        for line in text.splitlines():
            if wanted in line:
                return Step(text=f"found: {line.strip()}")
    if not tool_offered:
        return Step(text=DONT_KNOW)
    asked = {
        json.loads((c.get("function") or {}).get("arguments") or "{}").get("id")
        for m in history
        for c in m.get("tool_calls") or ()
    }
    ids = []
    for text in texts:
        for handle in HANDLE.findall(text):
            if handle not in asked and handle not in ids:
                ids.append(handle)
    return Step(ids=tuple(ids), query=query) if ids else Step(text=DONT_KNOW)


def chat_call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    """One chat completions tool call of ``name`` with ``args`` (its id made of both)."""
    return {
        "id": f"call_{name}_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def chat_calls(step: Step) -> list[dict[str, Any]]:
    """The step's recall calls as chat completions ``tool_calls``."""
    out = []
    for n, handle in enumerate(step.ids):
        args: dict[str, str] = {"id": handle}
        if step.query:
            args["query"] = step.query
        out.append(
            {
                "id": f"call_recall_{handle}_{n}",
                "type": "function",
                "function": {"name": TOOL, "arguments": json.dumps(args)},
            }
        )
    return out


def chat_tool_stream(
    calls: list[dict[str, Any]],
    *,
    model: str = "mock-model",
    preamble: str = "",
    pause: float = 0.0,
) -> list[bytes | float]:
    """A streamed chat completion that calls tools (each call's arguments in two deltas), after
    ``preamble`` text if any, and ``pause`` seconds after that text."""

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return chunk_event(delta, finish, model=model)

    out: list[bytes | float] = [event({"role": "assistant", "content": None})]
    if preamble:
        out += [event({"content": preamble}), *([pause] if pause else [])]
    for index, call in enumerate(calls):
        args = call["function"]["arguments"]
        head = {"index": index, "id": call["id"], "type": "function"}
        out.append(
            event(
                {
                    "tool_calls": [
                        {
                            **head,
                            "function": {"name": call["function"]["name"], "arguments": args[:5]},
                        }
                    ]
                }
            )
        )
        out.append(event({"tool_calls": [{"index": index, "function": {"arguments": args[5:]}}]}))
    out.append(event({}, "tool_calls"))
    out.append(b"data: [DONE]\n\n")
    return out
