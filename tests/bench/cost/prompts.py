"""What a provider received, as the pieces its prompt cache compares.

A provider renders a request with its chat template and tokenizes the result; its cache compares
those tokens. The order is tools, then the system prompt, then the messages: OpenAI's cookbook
("Prompt Caching 201", openai/openai-cookbook examples/Prompt_Caching_201.ipynb, 4.3: tools and
schemas "get injected before developer instructions") and Anthropic's prompt-caching guide
(docs.claude.com, build-with-claude/prompt-caching: the prefix is "tools, system, and messages
(in that order)").

We have neither template nor the providers' tokenizers, so each piece (a tool, the system prompt,
a message, an Anthropic content block) is rendered as plain text and tokenized on its own with
tiktoken's o200k_base. An approximation of the billed counts (Claude's tokenizer cuts the same text
differently; a template adds a few tokens per message), and a faithful model of what the figures
depend on: two requests share a prefix exactly as far as their pieces are equal, and a piece costs
about what the provider bills for it. Cache marks are not part of a piece: moving a
``cache_control`` mark changes where a cache entry is written, never what the prefix holds.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any

import tiktoken

CACHE_MARK = "cache_control"


class Tokenizer:
    """o200k_base token ids of a text, remembered: the same messages come back on every turn."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self._encoding = tiktoken.get_encoding(encoding)
        self._ids: dict[str, array] = {}

    def ids(self, text: str) -> array:
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = array("I", self._encoding.encode_ordinary(text))
        return found

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def decode(self, ids: array) -> str:
        return self._encoding.decode(list(ids))


@dataclass(frozen=True, slots=True)
class Block:
    """One Anthropic content block (or tool, or system block) as the cache sees it."""

    text: str
    marked: bool  # carries a cache_control breakpoint


def _json(value: Any) -> str:
    # Key order as received: a schema whose keys moved is another prefix, as on the wire.
    return json.dumps(value, ensure_ascii=False)


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != CACHE_MARK}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _text_of(content: Any) -> str:
    """The text of a content value: a string, or parts/blocks whose text is joined (any other
    part counted as its JSON)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else _json(content)
    texts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            texts.append(_json(_unmarked(part)))
    return "\n".join(texts)


# --- OpenAI: chat completions and Responses ------------------------------------------------------


def _chat_message(message: dict[str, Any]) -> str:
    head = f"<|{message.get('role')}|>"
    if isinstance(message.get("name"), str):
        head += f" name={message['name']}"
    if isinstance(message.get("tool_call_id"), str):
        head += f" id={message['tool_call_id']}"
    lines = [head, _text_of(message.get("content"))]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        lines.append(
            f"<|call|>{function.get('name')}({function.get('arguments')}) id={call.get('id')}"
        )
    return "\n".join(lines)


def chat_pieces(body: dict[str, Any]) -> list[str]:
    """A chat completions request: each tool, then each message."""
    pieces = [_json(tool) for tool in body.get("tools") or ()]
    pieces += [_chat_message(m) for m in body.get("messages") or () if isinstance(m, dict)]
    return pieces


def _responses_item(item: Any) -> str:
    if isinstance(item, str):
        return f"<|user|>\n{item}"
    if not isinstance(item, dict):
        return _json(item)
    kind = item.get("type", "message")
    if kind == "message":
        return f"<|{item.get('role')}|>\n{_text_of(item.get('content'))}"
    if kind == "function_call":
        return f"<|call|>{item.get('name')}({item.get('arguments')}) id={item.get('call_id')}"
    if kind == "function_call_output":
        return f"<|tool|> id={item.get('call_id')}\n{_text_of(item.get('output'))}"
    return _json(item)


def responses_pieces(body: dict[str, Any]) -> list[str]:
    """A Responses request: each tool, the instructions, then each input item."""
    pieces = [_json(tool) for tool in body.get("tools") or ()]
    if isinstance(body.get("instructions"), str):
        pieces.append(f"<|system|>\n{body['instructions']}")
    items = body.get("input")
    items = [items] if isinstance(items, str) else items or ()
    return pieces + [_responses_item(item) for item in items]


# --- Anthropic Messages ------------------------------------------------------------------------


def _marked(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    inner = block.get("content")
    nested = isinstance(inner, list) and any(_marked(b) for b in inner)
    return CACHE_MARK in block or nested


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return _json(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"<|call|>{block.get('name')}({_json(block.get('input'))}) id={block.get('id')}"
    if kind == "tool_result":
        error = " error" if block.get("is_error") else ""
        head = f"<|result|> id={block.get('tool_use_id')}{error}"
        return f"{head}\n{_text_of(block.get('content', ''))}"
    if kind == "thinking":
        return str(block.get("thinking", ""))
    return _json(_unmarked(block))


def messages_blocks(body: dict[str, Any]) -> list[Block]:
    """A Messages request as its content blocks, in cache order: each tool, each system block,
    each block of each message (a string content is one block). The first block of a message
    carries its role, as a template would."""
    blocks = [Block(_json(_unmarked(t)), _marked(t)) for t in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for i, block in enumerate(system or ()):
        head = "<|system|>\n" if i == 0 else ""
        blocks.append(Block(head + _block_text(block), _marked(block)))
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for i, block in enumerate(content or ()):
            head = f"<|{message.get('role')}|>\n" if i == 0 else ""
            blocks.append(Block(head + _block_text(block), _marked(block)))
    return blocks
