"""Hypothesis strategies: random but well-formed conversations, shaped like real agent traffic."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Message = dict[str, Any]


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Preamble (maybe none), then blocks: user turns (sometimes several in a row), assistant
    text, parallel tool calls with answers in any order (some errors), legacy function calls,
    mid-conversation system messages, sometimes a user message arriving before the tool results;
    may start with the assistant and end on a tool result."""
    messages: list[Message] = [
        {"role": draw(st.sampled_from(["system", "developer"])), "content": f"rules {i}"}
        for i in range(draw(st.integers(0, 2)))
    ]
    if draw(st.booleans()):
        messages.append({"role": "assistant", "content": "Hello, how can I help?"})
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "user", "text", "tools", "tools", "function", "sys"]))
        words = "w " * draw(st.integers(1, 60))
        if kind == "user":
            messages.append({"role": "user", "content": "ask " + words})
        elif kind == "text":
            messages.append({"role": "assistant", "content": "say " + words})
        elif kind == "sys":
            messages.append({"role": "system", "content": "note " + words})
        elif kind == "function":
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "legacy", "arguments": "{}"},
                }
            )
            messages.append({"role": "function", "name": "legacy", "content": "done " + words})
        else:
            call_ids = [f"call_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, "let me look"])),
                    "tool_calls": [
                        {
                            "id": c,
                            "type": "function",
                            "function": {"name": "run", "arguments": "{}"},
                        }
                        for c in call_ids
                    ],
                }
            )
            if draw(st.integers(0, 5)) == 0:
                # Malformed but seen: the user interjects before the results come back.
                messages.append({"role": "user", "content": "are you done?"})
            for c in draw(st.permutations(call_ids)):
                failed = draw(st.booleans())
                text = '{"error": "boom"}' if failed else "output " + words
                messages.append({"role": "tool", "tool_call_id": c, "content": text})
    if not any(m["role"] == "user" for m in messages) or draw(st.booleans()):
        messages.append({"role": "user", "content": "final question"})
    return messages


def tool_pairs_intact(messages: list[Message]) -> bool:
    """No orphan tool/function result, no assistant call without all its answers."""
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    called: set[str] = set()
    pending_function = False
    for m in messages:
        if m["role"] == "assistant":
            ids = [c["id"] for c in m.get("tool_calls") or ()]
            if not set(ids) <= answered:
                return False
            called.update(ids)
            pending_function = m.get("function_call") is not None
        elif m["role"] == "tool" and m["tool_call_id"] not in called:
            return False
        elif m["role"] == "function":
            if not pending_function:
                return False
            pending_function = False
    return True


@st.composite
def agent_runs(draw: st.DrawFn) -> list[Message]:
    """A coding agent's run: maybe earlier turns, then one task followed by many tool rounds
    (parallel calls answered in any order, legacy function calls, an assistant note between
    rounds), maybe a user message arriving before a round's results (malformed but seen)."""
    messages = draw(conversations()) if draw(st.booleans()) else []
    if not messages or messages[0]["role"] not in ("system", "developer"):
        messages.insert(0, {"role": "system", "content": "You are a coding agent."})
    messages.append({"role": "user", "content": "fix the failing tests"})
    ids = iter(range(10_000, 20_000))
    for _ in range(draw(st.integers(1, 25))):
        words = "out " * draw(st.integers(1, 80))
        kind = draw(st.sampled_from(["tools", "tools", "tools", "function", "note"]))
        if kind == "note":
            messages.append({"role": "assistant", "content": "progress: " + words[:40]})
        elif kind == "function":
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "legacy", "arguments": "{}"},
                }
            )
            messages.append({"role": "function", "name": "legacy", "content": words})
        else:
            call_ids = [f"call_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": c, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
                        for c in call_ids
                    ],
                }
            )
            if draw(st.integers(0, 30)) == 0:
                messages.append({"role": "user", "content": "still there?"})
            for c in draw(st.permutations(call_ids)):
                messages.append({"role": "tool", "tool_call_id": c, "content": words})
    return messages
