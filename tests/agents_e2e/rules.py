"""What each provider refuses in a conversation history, as the strict provider checks it.

Written from the providers' API references and their documented 400 errors, never from the
proxy's adapters: a problem found here means the proxy (or the agent) sent a history the real
provider would refuse. Each function returns the problems as the provider would word them; an
empty list means the body is accepted.

Thinking signatures and encrypted reasoning are the provider's own: ``seal`` makes them, and a
block or item that comes back with anything changed fails ``intact``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.support.anthropic_provider import blocks, mark_problems

_KEY = b"e2e-provider-key"  # the scripted provider's signing key (a test value, not a secret)
MID_CONVERSATION_SYSTEM = "mid-conversation-system"  # the anthropic-beta flag that allows them


def seal(text: str) -> str:
    """The signature the provider gives ``text`` (a thinking block, an encrypted reasoning)."""
    return hashlib.sha256(_KEY + text.encode()).hexdigest()[:32]


def intact(text: str, signature: str) -> bool:
    return seal(text) == signature


def anthropic_problems(body: dict[str, Any], beta: str = "") -> list[str]:
    """Anthropic Messages: the first turn is the user's, roles alternate, every ``tool_use``
    is answered by a ``tool_result`` in the next user turn (and no result answers nothing),
    thinking blocks come back with their signatures, text blocks are not empty, at most four
    ``cache_control`` marks. ``system`` turns inside ``messages`` are accepted only under the
    mid-conversation-system beta, and are transparent to the rules around them."""
    found: list[str] = []
    allow_system = MID_CONVERSATION_SYSTEM in beta
    turns: list[tuple[int, dict[str, Any]]] = []
    for i, turn in enumerate(body.get("messages") or []):
        role = turn.get("role")
        if role == "system" and allow_system:
            continue
        if role not in ("user", "assistant"):
            found.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            continue
        turns.append((i, turn))
    if not turns or turns[0][1]["role"] != "user":
        found.append("messages: the first message must use the user role")
    open_calls: set[str] = set()
    previous = ""
    for i, turn in turns:
        role, content = turn["role"], blocks(turn.get("content"))
        if role == previous:
            found.append(f"messages.{i}: roles must alternate between user and assistant")
        previous = role
        for j, block in enumerate(content):
            if block.get("type") == "text" and not block.get("text"):
                found.append(
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
                )
            if block.get("type") == "thinking" and not intact(
                block.get("thinking", ""), block.get("signature", "")
            ):
                found.append(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        if role == "user":
            results = {b.get("tool_use_id") for b in content if b.get("type") == "tool_result"}
            for orphan in sorted(str(r) for r in results - open_calls):
                found.append(
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {orphan}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
            open_calls -= results
        if open_calls:
            found.append(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(open_calls))}. Each `tool_use` block "
                "must have a corresponding `tool_result` block in the next message."
            )
        open_calls = (
            {b["id"] for b in content if b.get("type") == "tool_use"}
            if role == "assistant"
            else set()
        )
    return found + mark_problems(body)


def chat_problems(body: dict[str, Any]) -> list[str]:
    """Chat completions: the ``tool`` messages after an assistant's ``tool_calls`` answer each
    call id before the next message of another role; a tool message answers a call of the
    assistant message just before its run."""
    found: list[str] = []
    open_calls: set[str] = set()
    answerable: set[str] = set()
    for i, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in answerable:
                found.append(
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceeding message with 'tool_calls' (messages.[{i}], id {call_id})."
                )
            open_calls.discard(call_id)
            continue
        if open_calls:
            found.append(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(open_calls))} (messages.[{i}])"
            )
        calls = message.get("tool_calls") or [] if role == "assistant" else []
        open_calls = {c.get("id") for c in calls}
        answerable = set(open_calls)
    if open_calls:
        found.append(f"tool_call_ids without response messages: {', '.join(sorted(open_calls))}")
    return found


CALLS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUTS = {
    "function_call_output": "function_call",
    "custom_tool_call_output": "custom_tool_call",
    "local_shell_call_output": "local_shell_call",
}


def responses_problems(body: dict[str, Any]) -> list[str]:
    """Responses: every call's ``call_id`` has an output and every output a call before it;
    a reasoning item is followed by the item it came with, its ``encrypted_content`` intact;
    with ``store: false`` nothing is referred to by id."""
    found: list[str] = []
    items = body.get("input")
    if not isinstance(items, list):
        return found
    if body.get("store") is False and body.get("previous_response_id"):
        found.append("Previous response cannot be used when store is false.")
    called: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "item_reference" and body.get("store") is False:
            found.append(
                f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                "`store` is set to false."
            )
        if kind in CALLS:
            called.add(item.get("call_id"))
            found += _paired_reasoning(items, i)
        if kind in OUTPUTS and item.get("call_id") not in called:
            found.append(
                f"No tool call found for {OUTPUTS[kind]} output with call_id "
                f"{item.get('call_id')} (input[{i}])."
            )
        if kind in OUTPUTS:
            answered.add(item.get("call_id"))
        if kind == "reasoning":
            found += _reasoning_problems(items, i)
    for call_id in sorted(str(c) for c in called - answered):
        found.append(f"No tool output found for function call {call_id}.")
    return found


def _reasoning_problems(items: list[dict[str, Any]], i: int) -> list[str]:
    item = items[i]
    found = []
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not _sealed(encrypted):
        found.append(
            f"input[{i}]: The encrypted content for item {item.get('id')} could not be verified."
        )
    following = items[i + 1] if i + 1 < len(items) else None
    if (
        following is None
        or following.get("type") == "reasoning"
        or following.get("role")
        in (
            "user",
            "system",
            "developer",
        )
    ):
        found.append(
            f"Item '{item.get('id')}' of type 'reasoning' was provided without its required "
            "following item."
        )
    return found


REASONED = "fc_r_"  # the id prefix of a call the provider made with a reasoning item


def _paired_reasoning(items: list[dict[str, Any]], i: int) -> list[str]:
    """A call that came with a reasoning item is sent back after it (the API's rule for
    reasoning models: the call alone is refused)."""
    item_id = str(items[i].get("id") or "")
    if not item_id.startswith(REASONED):
        return []
    reasoning = "rs_" + item_id[len(REASONED) :]
    before = items[i - 1] if i > 0 else {}
    if before.get("type") == "reasoning" and before.get("id") == reasoning:
        return []
    return [
        f"Item '{item_id}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{reasoning}'."
    ]


def _sealed(encrypted: str) -> bool:
    text, _, signature = encrypted.rpartition(".")
    return intact(text, signature)


def encrypt(payload: dict[str, Any]) -> str:
    """An opaque ``encrypted_content`` the provider can verify when it comes back."""
    text = json.dumps(payload, sort_keys=True).encode().hex()
    return f"{text}.{seal(text)}"
