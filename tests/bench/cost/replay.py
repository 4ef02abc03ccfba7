"""One transcript played turn by turn with an official SDK, as its client would send it.

Each turn sends the transcript's messages up to the next assistant message and ignores the answer
(the transcript decides what comes next), so direct and proxied runs send the same turns. Every
other turn is streamed. Headers: ``X-Bench-Clock`` (the turn's simulated time) and
``X-Bench-Output-Tokens`` (the size of the transcript's answer, so output is billed as the model
would have written it), both forwarded by the proxy as end-to-end headers.

Two caching rules, two wire APIs:
- ``openai``: chat completions; the provider caches automatically, nothing to mark.
- ``anthropic``: Messages, with breakpoints placed as Claude Code places them: one on the system
  prompt (with the tools before it, the stable head) and one on the last block of the last
  message, moving forward every turn so the next turn reads what this one wrote (two of the four
  allowed; the proxy may add its own).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk

from tests.bench.cost.prompts import Tokenizer, chat_pieces
from tests.bench.cost.provider import CLOCK_HEADER, OUTPUT_HEADER
from tests.bench.cost.transcripts import Transcript

MARK = {"type": "ephemeral"}
MAX_TOKENS = 4096
TIMEOUT = 300.0  # seconds: an inline summary of a long prompt is slow on a busy machine


@dataclass(frozen=True)
class Rule:
    """A caching rule and the API and model that exercise it."""

    name: str  # openai | anthropic
    model: str
    route: str  # the proxy's route label in /metrics


@dataclass
class Seen:
    """What the client saw: X-Compaction outcomes (``applied-unchanged``: applied, the same
    tokens before and after) and the usage the responses reported."""

    outcomes: Counter = field(default_factory=Counter)
    turns: int = 0
    prompt: int = 0
    cached: int = 0
    written: int = 0
    output: int = 0

    def response(self, response: Any) -> None:  # an httpx (or httpx2) response
        headers = response.headers
        outcome = headers.get("x-compaction", "none")
        before = headers.get("x-compaction-tokens-before")
        if outcome == "applied" and before == headers.get("x-compaction-tokens-after"):
            outcome = "applied-unchanged"  # nothing changed should say skipped
        self.outcomes[outcome] += 1

    def add(self, prompt: int, cached: int, written: int, output: int) -> None:
        self.turns += 1
        self.prompt += prompt
        self.cached += cached
        self.written += written
        self.output += output


@dataclass(frozen=True)
class Target:
    """Where the turns go, and what to do after each one."""

    url: str  # no /v1
    headers: dict[str, str]
    settle: Callable[[int], None]  # called with the number of turns answered so far
    at: Callable[[float], None]  # told each turn's simulated time before it is sent


Billed = tuple[int, int, int, int]  # prompt, cached, written, output, as the client read them


def replay(
    transcript: Transcript,
    rule: Rule,
    target: Target,
    tokenizer: Tokenizer,
    seen: Seen | None = None,
) -> Seen:
    """Play every turn of ``transcript`` to ``target``; what the client saw (into ``seen``
    when given: a subclass may keep more of each answer)."""
    seen = Seen() if seen is None else seen
    api = (_Chat if rule.name == "openai" else _Messages)(transcript, rule.model, target, seen)
    try:
        for k, turn in enumerate(transcript.turns()):
            target.at(turn.at)
            answer = transcript.messages[turn.answer]
            output = sum(tokenizer.count(p) for p in chat_pieces({"messages": [answer]}))
            headers = {**target.headers, CLOCK_HEADER: f"{turn.at:.3f}", OUTPUT_HEADER: str(output)}
            seen.add(*api.send(turn.answer, headers, stream=k % 2 == 1))
            target.settle(k + 1)
    finally:
        api.close()
    return seen


class _Chat:
    """Turns as chat completions requests, with the openai client."""

    def __init__(self, transcript: Transcript, model: str, target: Target, seen: Seen) -> None:
        self._transcript = transcript
        self._model = model
        http = httpx.Client(event_hooks={"response": [seen.response]}, timeout=TIMEOUT)
        self._client = openai.OpenAI(
            base_url=f"{target.url}/v1", api_key="sk-bench-caller", max_retries=0, http_client=http
        )

    def send(self, answer: int, headers: dict[str, str], *, stream: bool) -> Billed:
        tools = self._transcript.tools
        request: dict[str, Any] = {
            "model": self._model,
            "messages": self._transcript.messages[:answer],
            "extra_headers": headers,
            **({"tools": tools} if tools else {}),
        }
        if stream:
            usage = _streamed_chat_usage(self._client, request)
        else:
            usage = self._client.chat.completions.create(**request).usage
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        return usage.prompt_tokens, cached, 0, usage.completion_tokens

    def close(self) -> None:
        self._client.close()


def _streamed_chat_usage(client: openai.OpenAI, request: dict[str, Any]) -> CompletionUsage:
    """The usage of a streamed chat completion, read to the end of the stream.

    Not by iterating the SDK's Stream: openai-python stops at ``data: [DONE]`` and closes the
    connection at once, and the proxy, still relaying the end of the body, then takes the
    request for a disconnect (a 499, its after-work skipped), at random. The raw lines of the
    same SDK call are read to the end instead, so every run does the same work.
    """
    usage = None
    with client.chat.completions.with_streaming_response.create(
        **request, stream=True, stream_options={"include_usage": True}
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = ChatCompletionChunk.model_validate_json(line.removeprefix("data: "))
                usage = chunk.usage or usage
    if usage is None:
        raise AssertionError("a streamed chat completion ended without its usage chunk")
    return usage


def anthropic_messages(transcript: Transcript) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The transcript's messages in Messages shape (a tool round's results in one user message),
    and for each assistant message's index how many of them come before it."""
    out: list[dict[str, Any]] = []
    before: dict[int, int] = {}
    for i, message in enumerate(transcript.messages):
        role = message["role"]
        if role == "system":
            continue
        if role == "assistant":
            before[i] = len(out)
            blocks = [{"type": "text", "text": message["content"]}] if message["content"] else []
            for call in message.get("tool_calls") or ():
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"].replace("call_", "toolu_"),
                        "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"].replace("call_", "toolu_"),
                "content": message["content"],
            }
            if out and out[-1]["role"] == "user" and out[-1]["content"][0]["type"] == "tool_result":
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        else:
            out.append({"role": "user", "content": [{"type": "text", "text": message["content"]}]})
    return out, before


def anthropic_tools(transcript: Transcript) -> list[dict[str, Any]]:
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "input_schema": tool["function"]["parameters"],
        }
        for tool in transcript.tools or ()
    ]


def _with_last_marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = messages[-1]
    blocks = [*last["content"][:-1], {**last["content"][-1], "cache_control": MARK}]
    return [*messages[:-1], {**last, "content": blocks}]


class _Messages:
    """Turns as Messages requests, with the anthropic client, breakpoints as Claude Code's."""

    def __init__(self, transcript: Transcript, model: str, target: Target, seen: Seen) -> None:
        self._model = model
        self._messages, self._before = anthropic_messages(transcript)
        system = transcript.messages[0]["content"]
        self._system = [{"type": "text", "text": system, "cache_control": MARK}]
        self._tools = {"tools": anthropic_tools(transcript)} if transcript.tools else {}
        # anthropic-python brings its own fork of httpx (httpx2): its client, the same hook.
        http = anthropic.DefaultHttpxClient(
            event_hooks={"response": [seen.response]}, timeout=TIMEOUT
        )
        self._client = anthropic.Anthropic(
            base_url=target.url, api_key="sk-ant-bench-caller", max_retries=0, http_client=http
        )

    def send(self, answer: int, headers: dict[str, str], *, stream: bool) -> Billed:
        request: dict[str, Any] = {
            "model": self._model,
            "max_tokens": MAX_TOKENS,
            "system": self._system,
            "messages": _with_last_marked(self._messages[: self._before[answer]]),
            "extra_headers": headers,
            **self._tools,
        }
        if stream:
            with self._client.messages.stream(**request) as events:
                usage = events.get_final_message().usage
        else:
            usage = self._client.messages.create(**request).usage
        read = usage.cache_read_input_tokens or 0
        written = usage.cache_creation_input_tokens or 0
        return usage.input_tokens + read + written, read, written, usage.output_tokens

    def close(self) -> None:
        self._client.close()
