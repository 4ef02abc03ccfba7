"""The strict scripted provider: one server for the three dialects and the proxy's summarizer.

Every request to ``/v1/messages``, ``/v1/chat/completions`` or ``/v1/responses`` is checked
against the provider's own rules (``rules``) and a broken history is refused with the real
API's 400 shape; otherwise the next step of the scripted session (``script``) is answered,
whole or streamed as asked. A chat completion for ``SUMMARIZER_MODEL`` is the proxy's
summarizer and gets a summary. Each request is logged with what the figures need: the
harness's sequence header, whether the body held a summary, the problems found, whether the
answer was a recall call.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.agents_e2e import replies, rules
from tests.agents_e2e.script import RECALL_TOOL, Action, Turn, next_action, recall_ids, text_of
from tests.support.anthropic_provider import blocks
from tests.support.mock_upstream import MockUpstream, Received, Reply, completion, json_reply

SUMMARIZER_MODEL = "e2e-summarizer"
SEQUENCE = "x-e2e-seq"  # the harness numbers each agent request; the proxy forwards it
SUMMARY = (
    "The user asked to fix the failing unit tests of a small project. The assistant listed the "
    "project, read README.md and the modules under pkg/, grepped for definitions and imports, "
    "and ran the tests: test_add fails because calc.add subtracts. Next: edit calc.py and rerun "
    "the tests."
)
SUMMARY_MARK = SUMMARY[:60]


@dataclass
class Seen:
    """One request the provider answered."""

    route: str
    seq: int | None
    status: int
    problems: list[str] = field(default_factory=list)
    summary: bool = False
    summarizer: bool = False
    recall: bool = False


def _anthropic_turn(body: dict[str, Any]) -> Turn:
    tools = {t["name"]: t.get("input_schema") or {} for t in body.get("tools") or [] if "name" in t}
    observations, last_call = [], ""
    for turn in body.get("messages") or []:
        for block in blocks(turn.get("content")):
            if turn.get("role") == "assistant" and block.get("type") == "tool_use":
                last_call = block.get("name", "")
            elif turn.get("role") == "user" and block.get("type") in ("tool_result", "text"):
                observations.append(
                    text_of(
                        block.get("content") if block["type"] == "tool_result" else block["text"]
                    )
                )
    return Turn(tools, observations, last_call, recall_ids(observations))


def _chat_turn(body: dict[str, Any]) -> Turn:
    tools = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in body.get("tools") or []
        if isinstance(t.get("function"), dict)
    }
    observations, last_call = [], ""
    for message in body.get("messages") or []:
        if message.get("role") in ("tool", "user"):
            observations.append(text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            last_call = call.get("function", {}).get("name", "")
    return Turn(tools, observations, last_call, recall_ids(observations))


def _responses_turn(body: dict[str, Any]) -> Turn:
    tools = {t["name"]: t.get("parameters") or {} for t in body.get("tools") or [] if t.get("name")}
    observations, last_call = [], ""
    items = body.get("input")
    for item in items if isinstance(items, list) else [{"role": "user", "content": items}]:
        if item.get("type", "message") == "message" and item.get("role") == "user":
            observations.append(text_of(item.get("content")))
        elif str(item.get("type", "")).endswith("_output"):
            observations.append(text_of(item.get("output")))
        elif item.get("type") in rules.CALLS:
            last_call = item.get("name", "")
    return Turn(tools, observations, last_call, recall_ids(observations))


class StrictProvider:
    def __init__(self, mock: MockUpstream, steps: list[str]) -> None:
        self.mock = mock
        self.steps = steps
        self.seen: list[Seen] = []
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        mock.default = self

    def __call__(self, request: Received) -> Reply:
        path = request.path
        if request.method == "GET" and path.endswith("/models"):
            return json_reply({"object": "list", "data": [{"id": "e2e-model", "object": "model"}]})
        if path.endswith("/count_tokens"):
            return json_reply({"input_tokens": len(request.body) // 4})
        if request.method != "POST" or not path.endswith(
            ("/messages", "/chat/completions", "/responses")
        ):
            return json_reply(
                {
                    "error": {
                        "message": f"{path}: not found",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
                404,
            )
        body = request.json()
        seq = request.headers.get(SEQUENCE)
        seen = Seen(route=path.rsplit("/v1", 1)[-1], seq=int(seq) if seq else None, status=200)
        # The summary's own words, not the tag: the agents read this repository's files, and
        # a tool result that quotes "agent_summary" is not a summary the proxy sent.
        seen.summary = SUMMARY_MARK in request.body.decode(errors="replace")
        with self._lock:
            self.seen.append(seen)
            n = next(self._numbers)
        if path.endswith("/chat/completions") and body.get("model") == SUMMARIZER_MODEL:
            seen.summarizer = True
            return json_reply(completion(SUMMARY, model=SUMMARIZER_MODEL))
        return self._answer(request, body, seen, n)

    def _answer(self, request: Received, body: dict[str, Any], seen: Seen, n: int) -> Reply:
        stream = bool(body.get("stream"))
        model = body.get("model", "e2e-model")
        tokens = max(1, len(request.body) // 4)
        if request.path.endswith("/messages"):
            seen.problems = rules.anthropic_problems(
                body, request.headers.get("anthropic-beta", "")
            )
            if seen.problems:
                return self._refuse(seen, anthropic=True)
            action = self._act(seen, _anthropic_turn(body))
            thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
            return replies.anthropic(
                action, n, model=model, thinking=thinking, stream=stream, tokens=tokens
            )
        if request.path.endswith("/chat/completions"):
            seen.problems = rules.chat_problems(body)
            if seen.problems:
                return self._refuse(seen)
            return replies.chat(
                self._act(seen, _chat_turn(body)), n, model=model, stream=stream, tokens=tokens
            )
        seen.problems = rules.responses_problems(body)
        if seen.problems:
            return self._refuse(seen)
        reasoning = "reasoning.encrypted_content" in (body.get("include") or [])
        action = self._act(seen, _responses_turn(body))
        return replies.responses(
            action, n, model=model, reasoning=reasoning, stream=stream, tokens=tokens
        )

    def _act(self, seen: Seen, turn: Turn) -> Action:
        action = next_action(turn, self.steps)
        seen.recall = action.name == RECALL_TOOL
        return action

    @staticmethod
    def _refuse(seen: Seen, *, anthropic: bool = False) -> Reply:
        seen.status = 400
        message = "; ".join(seen.problems)
        if anthropic:
            return json_reply(
                {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                400,
            )
        return json_reply(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": None,
                }
            },
            400,
        )
