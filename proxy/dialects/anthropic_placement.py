"""Where Anthropic's API accepts a ``role: "system"`` message inside ``messages``, and moving one a
cut left elsewhere to the first place after it that the API accepts.

The rule (Anthropic's docs, "Mid-conversation system messages", Limitations): a run of system
messages (consecutive ones are one system section) must immediately follow a ``user`` turn (one
carrying ``tool_result`` blocks counts) or an ``assistant`` turn ending in a server tool result,
and must precede an ``assistant`` turn or end the array; it is never the first entry, and so
never sits between a ``tool_use`` and the ``tool_result`` answering it. Anything else is a 400.

A body the client sent and the provider accepts has every system message in such a place, and
``placed`` leaves it as it is. A compacted body can break the rule only where the proxy joined two
parts of the history: a pinned system message sent again after the summary would open the list,
or follow an assistant turn the cut put before it. Such a run waits for the next place the API
accepts (after the next user turn that an assistant turn or the end follows) and goes there,
in its order. Nothing else moves, so user and assistant turns keep their order and every
``tool_use`` is still answered in the next turn.
"""

from __future__ import annotations

from proxy.types import AnthropicMessage

SYSTEM = "system"


def _ends_in_server_result(turn: AnthropicMessage) -> bool:
    content = turn.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[-1], dict):
        return False
    kind = content[-1].get("type")
    # web_search_tool_result, code_execution_tool_result, ...: a server tool's answer
    return isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result"


def _after(before: AnthropicMessage | None) -> bool:
    """A system section may come right after ``before``."""
    if before is None:
        return False
    role = before.get("role")
    return role == "user" or (role == "assistant" and _ends_in_server_result(before))


def _before(after: AnthropicMessage | None) -> bool:
    """A system section may come right before ``after``."""
    return after is None or after.get("role") == "assistant"


def placed(messages: list[AnthropicMessage]) -> list[AnthropicMessage]:
    """``messages`` with every system section where the API accepts it: in place when it is,
    else at the first accepted place after it. The same list when nothing moves."""
    out: list[AnthropicMessage] = []
    held: list[AnthropicMessage] = []  # system messages waiting for a place, in order
    moved = False
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if message.get("role") != SYSTEM:
            out.append(message)
            i += 1
            after = messages[i] if i < n else None
            if held and _after(message) and _before(after):  # a system run next: joined there
                out.extend(held)
                held = []
            continue
        end = i
        while end < n and messages[end].get("role") == SYSTEM:
            end += 1
        section = [*held, *messages[i:end]]
        after = messages[end] if end < n else None
        if _after(out[-1] if out else None) and _before(after):
            out.extend(section)
            held = []
        else:
            held = section
            moved = True
        i = end
    if not moved:
        return messages
    return out + held  # no accepted place left: last, for the provider to judge
