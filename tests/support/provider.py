"""A scripted OpenAI-compatible provider for the compaction tests, on top of MockUpstream.

It answers the summarizer's calls (model ``mock-summarizer``) with numbered summaries, calls
tools when a user message asks for it, and can fail summaries, slow them down, or refuse prompts
that are too long the way real providers do: over a message count, or over a token window
counted as the proxy counts (tiktoken o200k for gpt-4o), answering ``context_length_exceeded``.

An *agent run*: while the prompt holds a user message with ``AGENT`` in it and ends
with that message or a tool result, every answer is one more tool call (``run_tests``); the test
plays the tool and decides when the run ends.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from proxy.core.tokens import TokenCounter
from tests.support.config import SUMMARIZER_MODEL
from tests.support.mock_upstream import (
    ChatScript,
    MockUpstream,
    Reply,
    completion,
    json_reply,
    sse_chunks,
    sse_reply,
)

SYSTEM = {"role": "system", "content": "You are a careful coding agent."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 100 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


class Provider(ChatScript):
    def __init__(self, mock: MockUpstream) -> None:
        super().__init__(mock)
        self.summaries = 0
        self.fail_summaries = False
        self.summary_delay = 0.0
        self.summary_padding = ""  # appended to each summary: one as long as a real one
        self.max_messages: int | None = None  # more is a context_length_exceeded answer
        self.empty_stream_on_overflow = False  # llama-cpp-python's answer to a long stream
        self.window_tokens: int | None = None  # a model with this context window
        self.prompt_tokens: list[int] = []  # of every chat prompt answered or refused
        self.overflows = 0  # prompts refused for the window
        self._counter: TokenCounter | None = None
        self._calls = 0

    def chat(self, body: dict[str, Any]) -> Reply:
        if body.get("model") == SUMMARIZER_MODEL:
            return self._summary(body)
        messages = body["messages"]
        if self.max_messages is not None and len(messages) > self.max_messages:
            if body.get("stream") and self.empty_stream_on_overflow:
                return Reply(headers=[("content-type", "text/event-stream")], chunks=[])
            return json_reply(OVERFLOW, status=400)
        if self.window_tokens is not None and self._over_window(body):
            return json_reply(self._window_error(), status=400)
        last = messages[-1]
        if _agent_running(messages):
            with self._lock:
                self._calls += 1
                n = self._calls
            call = {
                "id": f"call_run_{n}",
                "type": "function",
                "function": {"name": "run_tests", "arguments": json.dumps({"attempt": n})},
            }
            return json_reply(completion("", tool_calls=[call]))
        if last["role"] == "user" and "TOOL" in str(last.get("content")):
            n = len(messages)
            calls = [
                {
                    "id": f"call_{n}_{k}",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": f"src/f{n}_{k}.py"}),
                    },
                }
                for k in ("a", "b")
            ]
            return json_reply(completion("", tool_calls=calls))
        text = f"done: saw {len(messages)} messages"
        if body.get("stream"):
            return sse_reply(sse_chunks([text[:4], text[4:]]))
        return json_reply(completion(text))

    def _summary(self, body: dict[str, Any]) -> Reply:
        if self.fail_summaries:
            return json_reply(
                {"error": {"message": "summarizer down", "type": "server_error"}}, status=500
            )
        with self._lock:
            self.summaries += 1
            n = self.summaries
        text = f"SUMMARY-{n}: the agent edited files as the user asked.{self.summary_padding}"
        reply = json_reply(completion(text))
        reply.delay = self.summary_delay
        return reply

    def _over_window(self, body: dict[str, Any]) -> bool:
        if self._counter is None:
            self._counter = TokenCounter()
        tokens = self._counter.count_messages(body["messages"], "gpt-4o")
        tokens += self._counter.count_tools(body.get("tools"), "gpt-4o")
        with self._lock:
            self.prompt_tokens.append(tokens)
            if tokens > (self.window_tokens or 0):
                self.overflows += 1
                return True
        return False

    def _window_error(self) -> dict[str, Any]:
        message = f"This model's maximum context length is {self.window_tokens} tokens."
        return {"error": {**OVERFLOW["error"], "message": message}}

    def chat_requests(self) -> list[dict[str, Any]]:
        """What the provider received for the conversation itself (not summaries)."""
        return [
            r.json() for r in self.mock.chat_requests() if r.json().get("model") != SUMMARIZER_MODEL
        ]

    def summary_requests(self) -> list[dict[str, Any]]:
        return [
            r.json() for r in self.mock.chat_requests() if r.json().get("model") == SUMMARIZER_MODEL
        ]


def take_turn(
    client: openai.OpenAI,
    history: list[dict[str, Any]],
    text: str,
    *,
    model: str = "gpt-4o",
    tool_output: str = "",
    **extra: Any,
) -> list[dict[str, str]]:
    """One user turn, tool calls included; appends to ``history``; returns response headers.
    Each tool result is "contents of <arguments>" followed by ``tool_output``."""
    history.append({"role": "user", "content": text})
    seen = []
    while True:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=history, tools=TOOLS, **extra
        )
        seen.append(dict(raw.headers))
        message = raw.parse().choices[0].message
        history.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return seen
        for call in message.tool_calls:
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": f"contents of {call.function.arguments}{tool_output}",
                }
            )


def check_sent(sent: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    """What any compacted request must look like: the preamble, at most one summary right after
    it, every tool call with all its answers, and the client's newest turn verbatim."""
    assert sent[0] == SYSTEM
    summaries = [
        i for i, m in enumerate(sent) if str(m.get("content", "")).startswith("<agent_summary>")
    ]
    assert summaries in ([], [1]), summaries
    if summaries:
        content = sent[1]["content"]
        assert sent[1]["role"] == "system"
        assert content.count("<agent_summary>") == 1 and content.count("</agent_summary>") == 1
    open_calls: set[str] = set()
    for message in sent:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, "orphan tool result"
            open_calls.discard(message["tool_call_id"])
        else:
            assert not open_calls, "a tool call lost its answer"
        if message["role"] == "assistant":
            open_calls = {c["id"] for c in message.get("tool_calls") or []}
    # The kept turns are a verbatim run of the client's history ending with what was its newest
    # message then (``history`` may have grown since the request).
    tail = sent[2:] if summaries else sent[1:]
    ends = [j for j in range(len(tail), len(history) + 1) if history[j - len(tail) : j] == tail]
    assert ends, "the kept turns are not a verbatim slice of the client's history"
    assert history[ends[-1] - len(tail) - 1]["role"] != "tool" or not tail, "cut inside a tool pair"


def tool_output(n: int) -> str:
    """A test run's output: ~300-500 tokens, different every round."""
    lines = 15 + (n * 7) % 10
    return f"run {n}\n" + "".join(
        f"FAILED tests/test_mod_{n}.py::test_case_{i} - AssertionError: expected {i}, got {i + n}\n"
        for i in range(lines)
    )


def _agent_running(messages: list[dict[str, Any]]) -> bool:
    if messages[-1]["role"] not in ("user", "tool"):
        return False
    return any(m["role"] == "user" and "AGENT" in str(m.get("content")) for m in messages)


def talk(client: openai.OpenAI, turns: int) -> list[dict[str, Any]]:
    """A fresh conversation of ``turns`` user turns long enough for a summary to pay off."""
    history = [SYSTEM]
    for turn in range(turns):
        take_turn(client, history, f"Step {turn}: fix src/m{turn}.py. " + "Be thorough. " * 12)
    return history
