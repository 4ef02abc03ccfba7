"""A summary asked of the conversation's own model, on the prompt the provider has cached
("Make the summarizer cacheable"; ``proxy.compaction.summaries.prefix_summary``).

The call is the body the proxy sent for a request, byte for byte where the provider's cache
looks (tools, system, messages, and on Anthropic's API the client's ``cache_control`` marks),
with the summary instructions after it; only what cannot go on is changed: no streaming, a
``max_tokens`` of the summary's, no tool may be called. What each dialect does:

- chat completions: one user message appended; ``tool_choice: "none"`` when tools are declared;
  ``stream``, ``stream_options``, ``n``, ``response_format``, ``logprobs``, ``top_logprobs``,
  ``prediction`` and ``audio``/``modalities`` dropped;
- Anthropic Messages: the instructions as one more text block of the last user message (a new
  user message after an assistant one), after every block the client marked, so its breakpoint
  still reads the entry the request wrote; ``tool_choice: {"type": "none"}`` when tools are
  declared; ``stream`` dropped; ``max_tokens`` set;
- Responses: none (a stored response chain and its items are not worth the second format):
  the summarizer quotes the transcript there, as before.
"""

from __future__ import annotations

from typing import Any

from proxy.types import TextPart

_CHAT_DROPPED = (
    "stream",
    "stream_options",
    "n",
    "response_format",
    "logprobs",
    "top_logprobs",
    "prediction",
    "audio",
    "modalities",
    "max_tokens",
    "max_completion_tokens",
    "parallel_tool_calls",
)


def chat_summary_call(sent: dict[str, Any], instruction: str, max_tokens: int) -> dict[str, Any]:
    """The chat completions body asking for a summary after ``sent``'s messages."""
    body = {k: v for k, v in sent.items() if k not in _CHAT_DROPPED}
    body["messages"] = [*sent.get("messages", []), {"role": "user", "content": instruction}]
    body["max_completion_tokens"] = max_tokens
    if body.get("tools"):
        body["tool_choice"] = "none"
    return body


def chat_answer_text(answer: dict[str, Any]) -> str | None:
    """The text of a chat completion's first choice; None when it holds none."""
    try:
        message = answer["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    text = message.get("content") if isinstance(message, dict) else None
    return text if isinstance(text, str) else None


def messages_summary_call(
    sent: dict[str, Any], instruction: str, max_tokens: int
) -> dict[str, Any]:
    """The Anthropic Messages body asking for a summary after ``sent``'s messages."""
    body = {k: v for k, v in sent.items() if k != "stream"}
    messages = list(sent.get("messages", []))
    block: TextPart = {"type": "text", "text": instruction}  # a chat text part's shape
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "system":
        # A system message must end the list or precede an assistant turn: the instructions join
        # its section as one more (docs/dialects.md, "System messages inside messages").
        messages.append({"role": "system", "content": [block]})
    elif isinstance(last, dict) and last.get("role") == "user":
        content = last.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        messages[-1] = {**last, "content": [*(blocks or []), block]}
    else:
        messages.append({"role": "user", "content": [block]})
    body["messages"] = messages
    body["max_tokens"] = max_tokens
    if body.get("tools"):
        body["tool_choice"] = {"type": "none"}
    return body


def messages_answer_text(answer: dict[str, Any]) -> str | None:
    """The text blocks of an Anthropic message, joined; None when it holds none."""
    content = answer.get("content") if isinstance(answer, dict) else None
    if not isinstance(content, list):
        return None
    texts = [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return "".join(texts) if texts else None
