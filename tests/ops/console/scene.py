"""Conversations for the console to show: a proxy in front of the scripted provider, fed by the
official openai client, with a provider that bills as a real one would.

The scripted provider (``tests.support.provider``) reports 10 prompt tokens for every answer;
``BillingProvider`` reports what a real provider would bill instead: the prompt's size (about
four characters a token) and, as OpenAI's prompt cache does, the prefix shared with the previous
prompt read from the cache in 128-token blocks once it reaches 1,024 tokens. So the console's
timeline shows the cache effect a summary has: the prefix moves, the next prompt is a miss.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.config.settings import Settings
from tests.support.clients import KEY, openai_client
from tests.support.config import EVERY_THREE_INTERACTIONS, SUMMARIZER_MODEL, summarizing
from tests.support.mock_upstream import Reply
from tests.support.provider import SYSTEM, Provider, take_turn
from tests.support.servers import ThreadedUvicorn

OTHER_KEY = "sk-caller-two"  # a second tenant
# A file a tool returns: long enough that prompts reach the cache's 1,024 tokens in a few turns.
TOOL_OUTPUT = (
    "\n" + "def handler(event):\n    return process(event)  # a file the agent read\n" * 20
)
_CACHE_MIN, _CACHE_BLOCK = 1024, 128


def tokens_of(message: dict[str, Any]) -> int:
    return max(1, len(json.dumps(message)) // 4)


class BillingProvider(Provider):
    """The scripted provider, its answers' usage billed as a caching provider would."""

    def __init__(self, mock: Any) -> None:
        super().__init__(mock)
        self._previous: dict[str, list[dict[str, Any]]] = {}  # by first user message
        self.billed: list[tuple[int, int]] = []  # (prompt, cached) of each answer, in order

    def chat(self, body: dict[str, Any]) -> Reply:
        reply = super().chat(body)
        if body.get("model") == SUMMARIZER_MODEL or body.get("stream") or reply.status != 200:
            return reply  # the summarizer's calls keep the script's usage
        answer = json.loads(reply.chunks[0])  # type: ignore[arg-type]
        messages = body["messages"]
        prompt = sum(map(tokens_of, messages))
        first = next((str(m.get("content")) for m in messages if m["role"] == "user"), "")
        with self._lock:
            previous = self._previous.get(first, [])
            self._previous[first] = messages
        shared = 0
        for sent, before in zip(messages, previous, strict=False):
            if sent != before:
                break
            shared += tokens_of(sent)
        cached = shared // _CACHE_BLOCK * _CACHE_BLOCK if shared >= _CACHE_MIN else 0
        with self._lock:
            self.billed.append((prompt, cached))
        answer["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": 40,
            "total_tokens": prompt + 40,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        reply.chunks = [json.dumps(answer).encode()]
        return reply


def console_settings(provider_url: str, **sections: Any) -> Settings:
    """The proxy the console tests drive: the admin API behind the tests' token, a memory
    store, a summary inline every three interactions (the last one kept)."""
    return summarizing(provider_url, policy=EVERY_THREE_INTERACTIONS, **sections)


def talk(
    server: ThreadedUvicorn,
    conversation: str,
    turns: int,
    *,
    key: str = KEY,
    history: list[dict[str, Any]] | None = None,
    tool_output: str = "",
) -> list[dict[str, Any]]:
    """``turns`` user turns of ``conversation`` through the proxy (every other one calls a
    tool); the client's history, which it keeps and extends."""
    history = history if history is not None else [dict(SYSTEM)]
    client = openai_client(server, conversation, key=key)
    for _ in range(turns):
        n = sum(m["role"] == "user" for m in history)
        task = "read the files (TOOL)" if n % 2 else "go on with the plan"
        text = f"{conversation}, step {n}: {task}"
        take_turn(client, history, text, tool_output=tool_output)
    return history
