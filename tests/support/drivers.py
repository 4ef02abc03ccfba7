"""One agent, three dialects: the drivers of the behavioural suite (test_behaviour.py).

``Providers`` is the mock provider that serves all three dialects on one port: chat completions
(and the summarizer's calls, model ``mock-summarizer``) by tests/support/provider.py, the Responses
API by ResponsesProvider, Anthropic Messages by AnthropicProvider (the proxy's
``upstream.anthropic_base_url`` points at the same server). Each plays an agent that keeps
calling one tool while its task (``AGENT ... TOOL``) is running.

A ``Driver`` plays that agent with the official client of its dialect (``openai``
``chat.completions.create`` or ``responses.create``, ``anthropic.Anthropic().messages.create``),
records the bytes the client sent and what the provider received for each request, and reads any
body of its dialect into a dialect-neutral ``view``: a list of ``Entry`` (preamble, summary,
user, assistant with its call ids, tool result with the id of its call). The views are written
from each API's reference, never from the proxy's adapters, so that a test comparing the view of
what the client sent with the view of what the provider got checks the adapters.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anthropic
import httpx
import openai

from tests.support.anthropic_provider import AnthropicProvider
from tests.support.clients import KEY, openai_client
from tests.support.config import AGENT_RUN, FROZEN, SUMMARIZER_MODEL, summarizing
from tests.support.mock_upstream import MockUpstream, Received
from tests.support.provider import tool_output
from tests.support.responses_provider import ResponsesProvider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

SUMMARY_OPEN = "<agent_summary>"
PREAMBLE = "You are a careful coding agent."
TASK = "AGENT: fix the failing tests, one TOOL call at a time"


# --- the neutral view ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One piece of a conversation, whatever its dialect. Two entries are equal only when the
    wire pieces they come from are (``wire``: canonical JSON), so equal means verbatim."""

    kind: str  # preamble | summary | user | assistant | result
    text: str = ""
    ids: tuple[str, ...] = ()  # assistant: the calls it makes; result: the call it answers
    wire: str = ""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            _text(p.get("text", p.get("content"))) for p in content if isinstance(p, dict)
        )
    return ""


def _summary_text(text: str) -> bool:
    return text.startswith(SUMMARY_OPEN) and text.rstrip().endswith("</agent_summary>")


def chat_view(body: dict[str, Any]) -> list[Entry]:
    """Chat completions: ``messages``; the summary is a system message holding the tag."""
    entries = []
    for message in body["messages"]:
        role, content, wire = message["role"], message.get("content"), _canonical(message)
        if role == "system" and isinstance(content, str) and _summary_text(content):
            entries.append(Entry("summary", content, wire=wire))
        elif role in ("system", "developer"):
            entries.append(Entry("preamble", _text(content), wire=wire))
        elif role == "user":
            entries.append(Entry("user", _text(content), wire=wire))
        elif role == "assistant":
            ids = tuple(c["id"] for c in message.get("tool_calls") or ())
            entries.append(Entry("assistant", _text(content), ids, wire))
        elif role == "tool":
            entries.append(Entry("result", _text(content), (message["tool_call_id"],), wire))
        else:
            raise AssertionError(f"unknown chat role {role!r}")
    return entries


def responses_view(body: dict[str, Any]) -> list[Entry]:
    """Responses API: ``instructions`` then ``input`` items. The summary is one item exactly
    ``{"type": "message", "role": "system", "content": "<agent_summary>..."}``. Everything a
    model turn produced (reasoning, assistant messages, calls) up to the next user message or
    tool output is one assistant entry; each ``*_output`` item answers a call by ``call_id``."""
    entries = []
    if body.get("instructions"):
        entries.append(
            Entry("preamble", body["instructions"], wire=_canonical(body["instructions"]))
        )
    turn: list[dict[str, Any]] = []

    def close_turn() -> None:
        if turn:
            ids = tuple(i["call_id"] for i in turn if str(i.get("type")).endswith("_call"))
            text = " ".join(_text(i.get("content")) for i in turn if i.get("type") == "message")
            entries.append(Entry("assistant", text, ids, _canonical(turn)))
            turn.clear()

    for item in body["input"]:
        kind, role = item.get("type", "message"), item.get("role")
        if role == "assistant" or not (kind == "message" or kind.endswith("_output")):
            turn.append(item)  # the model's: reasoning, its message, its calls
            continue
        close_turn()
        wire = _canonical(item)
        if kind.endswith("_output"):
            entries.append(Entry("result", _text(item.get("output")), (item["call_id"],), wire))
        elif (
            role == "system"
            and item.keys() == {"type", "role", "content"}
            and isinstance(item["content"], str)
            and _summary_text(item["content"])
        ):
            entries.append(Entry("summary", item["content"], wire=wire))
        elif role in ("system", "developer"):
            entries.append(Entry("preamble", _text(item.get("content")), wire=wire))
        else:
            entries.append(Entry("user", _text(item.get("content")), wire=wire))
    close_turn()
    return entries


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def anthropic_view(body: dict[str, Any]) -> list[Entry]:
    """Anthropic Messages: ``system`` (a string or text blocks; the summary is a text block
    holding the tag), then ``messages``; a user message of ``tool_result`` blocks is one result
    per block, an assistant message one entry whose ``tool_use`` blocks are its calls."""
    entries = []
    for block in _blocks(body.get("system") or []):
        kind = "summary" if _summary_text(block["text"]) else "preamble"
        entries.append(Entry(kind, block["text"], wire=_canonical(block)))
    for message in body["messages"]:
        blocks = _blocks(message["content"])
        if message["role"] == "assistant":
            ids = tuple(b["id"] for b in blocks if b["type"] == "tool_use")
            entries.append(Entry("assistant", _text(blocks), ids, _canonical(message)))
            continue
        results = [b for b in blocks if b["type"] == "tool_result"]
        for result in results:
            text = _text(result.get("content"))
            entries.append(Entry("result", text, (result["tool_use_id"],), _canonical(result)))
        if not results:
            entries.append(Entry("user", _text(blocks), wire=_canonical(message)))
    return entries


# --- what one request was -----------------------------------------------------------------------


@dataclass
class Exchange:
    """One request of the client: its bytes, the response headers, and what the provider got
    for it (two prompts when the proxy retried), with their places in ``mock.received``."""

    sent: bytes
    headers: dict[str, str]
    mark: int  # len(mock.received) when the client sent it
    prompts: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        return self.headers.get("x-compaction", "")


@dataclass
class Run:
    history: list[dict[str, Any]]
    exchanges: list[Exchange] = field(default_factory=list)

    @property
    def outcomes(self) -> list[str]:
        return [e.outcome for e in self.exchanges]


class Providers:
    """The mock provider of all three dialects, on one MockUpstream."""

    def __init__(self, mock: MockUpstream) -> None:
        self.mock = mock
        self.responses = ResponsesProvider(mock)
        self.chat = self.responses.chat  # chat completions and the summarizer
        self.anthropic = AnthropicProvider(mock)
        mock.default = self.route

    def route(self, request: Received) -> Any:
        if request.path.startswith("/v1/messages"):
            return self.anthropic(request)
        return self.responses(request)  # which hands everything but /responses to the chat one

    @property
    def summaries(self) -> int:
        return self.chat.summaries

    def summary_calls(self, upto: int | None = None) -> int:
        """Summarizer calls among the first ``upto`` requests the mock received."""
        return sum(1 for r in self.mock.received[:upto] if _is_summary_call(r))


def _is_summary_call(request: Received) -> bool:
    return request.path.endswith("/chat/completions") and request.json().get("model") == (
        SUMMARIZER_MODEL
    )


class Driver:
    """Starts the proxy in front of ``Providers`` and plays the agent with its dialect's client.

    A subclass names its route, its client, how it takes one round and appends a tool result,
    where a tool result's text is, and its bad bodies; histories are its wire list (``messages``
    or ``input``), one round adding ``round_size`` entries."""

    name = ""
    route = ""
    label = ""  # the route's label in the proxy's metrics
    field = "messages"  # the body's history
    round_size = 2  # wire entries one round adds: the model's answer and the tool's output
    model = "gpt-4o"
    view: Callable[[dict[str, Any]], list[Entry]] = staticmethod(chat_view)

    def __init__(self, mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]) -> None:
        self.mock = mock
        self.providers = Providers(mock)
        self._start_proxy = start_proxy
        self.server: ThreadedUvicorn | None = None
        self._closers: list[Callable[[], None]] = []
        self._answered = 0  # requests of this driver the proxy answered

    def start(self, *, mode: str = "inline", input_tokens: int = 2000) -> ThreadedUvicorn:
        """The same proxy for every dialect: COMPACTING, a default policy that summarizes an
        agent run past ``input_tokens`` keeping 900 tokens, and ``frozen`` (off)."""
        trigger = {"input_tokens": input_tokens, "context_fraction": 0}
        policy = {**AGENT_RUN, "trigger": trigger, "keep": {"tokens": 900}}
        url = self.mock.url
        settings = summarizing(
            url, policy=policy, mode=mode, policies=FROZEN, upstream={"anthropic_base_url": url}
        )
        self.server = self._start_proxy(settings)
        return self.server

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()

    # --- playing the agent --------------------------------------------------------------------

    def run(
        self,
        conversation: str | None,
        rounds: int,
        history: list[dict[str, Any]] | None = None,
        *,
        key: str = KEY,
        headers: dict[str, str] | None = None,
        between: Callable[[], None] | None = None,
    ) -> Run:
        """``rounds`` requests of one task: each answered with a tool call, whose output the
        agent appends. ``between`` runs after each round (the tool running)."""
        extra = dict(headers or {})
        if conversation is not None:
            extra["X-Conversation-Id"] = conversation
        sent: list[bytes] = []
        client = self._client(key, extra, sent)
        self._closers.append(client.close)
        run = Run(history if history is not None else self.new_history())
        for _ in range(rounds):
            mark = len(self.mock.received)
            response_headers, calls = self._round(client, run.history)
            self._answered += 1
            exchange = Exchange(sent[-1], response_headers, mark)
            exchange.prompts = self._prompts_since(mark)
            run.exchanges.append(exchange)
            assert calls, "the mock plays an agent that keeps calling tools"
            for call_id in calls:
                self._append_result(run.history, call_id, tool_output(len(run.history)))
            if between is not None:
                between()
        return run

    def settle(self) -> None:
        """Waits (bounded) until the proxy is done with every request answered so far and has no
        summary queued or running: an agent whose tool takes longer than a summary, whatever the
        load (tests/support/settle.py)."""
        assert self.server is not None
        settle(self.server.url, route=self.label, answered=self._answered)

    def _prompts_since(self, mark: int) -> list[tuple[int, dict[str, Any]]]:
        found = []
        for i, request in enumerate(self.mock.received[mark:], start=mark):
            if request.path == self.route and not _is_summary_call(request):
                found.append((i, request.json()))
        return found

    @staticmethod
    def _keeping(sent: list[bytes]) -> dict[str, list[Callable[[Any], None]]]:
        """Event hooks for the SDK's HTTP client that keep the bytes of every request it sends."""
        return {"request": [lambda r: sent.append(r.read())]}

    def without_newest_round(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The history as it was before its newest round (a fork that asks it again)."""
        newest = self.view({self.field: history[-self.round_size :]})
        assert [e.kind for e in newest] == ["assistant", "result"], newest
        return copy.deepcopy(history[: -self.round_size])

    def with_first_result_edited(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        edited = copy.deepcopy(history)
        holder, key = self._first_result(edited)
        holder[key] = "a different test run"
        return edited

    def length(self, body: dict[str, Any]) -> int:
        """The prompt's length in wire entries (what ``refuse_longer_than`` counts)."""
        return len(body[self.field])

    def good_body(self) -> bytes:
        """A valid request of this dialect: the task alone."""
        return _json({"model": self.model, "max_tokens": 16, self.field: self.new_history()})

    def auth(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def error_of(self, response: httpx.Response) -> tuple[str, str]:
        """(type, message) of an error in OpenAI's shape; fails on any other shape."""
        body = response.json()
        assert body.keys() == {"error"}, body
        error = body["error"]
        assert error.keys() == {"message", "type", "param", "code"}, error
        return error["type"], f"{error['message']} {error['param']}"

    def post_raw(self, body: bytes, headers: dict[str, str], key: str = KEY) -> httpx.Response:
        assert self.server is not None
        return httpx.post(
            f"{self.server.url}{self.route}", content=body, headers={**self.auth(key), **headers}
        )

    # --- per dialect --------------------------------------------------------------------------

    def new_history(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _client(self, key: str, headers: dict[str, str], sent: list[bytes]) -> Any:
        """The official client, sending ``headers`` with every request, keeping its bytes."""
        raise NotImplementedError

    def _round(self, client: Any, history: list[dict[str, Any]]) -> tuple[dict[str, str], list]:
        """One request with the history; the answer appended; (response headers, call ids)."""
        raise NotImplementedError

    def _append_result(self, history: list[dict[str, Any]], call_id: str, text: str) -> None:
        raise NotImplementedError

    def _first_result(self, history: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
        """Where the first tool result's text is: (the dict holding it, its key)."""
        raise NotImplementedError

    def refuse_longer_than(self, length: int) -> None:
        """The provider refuses, as an overflow of its dialect, any prompt of more than
        ``length`` wire entries."""
        raise NotImplementedError

    def bad_bodies(self) -> list[tuple[bytes, str]]:
        """Bodies no request of this dialect may be, each with what its error must name."""
        raise NotImplementedError


class _OpenAIDriver(Driver):
    def _client(self, key: str, headers: dict[str, str], sent: list[bytes]) -> openai.OpenAI:
        assert self.server is not None
        http = openai.DefaultHttpxClient(event_hooks=self._keeping(sent))
        return openai_client(self.server, None, key=key, headers=headers, http_client=http)


class ChatDriver(_OpenAIDriver):
    name = label = "chat"
    route = "/v1/chat/completions"
    view = staticmethod(chat_view)
    tools: ClassVar[Any] = [
        {
            "type": "function",
            "function": {"name": "run_tests", "parameters": {"type": "object", "properties": {}}},
        }
    ]

    def new_history(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": PREAMBLE}, {"role": "user", "content": TASK}]

    def _round(self, client: openai.OpenAI, history: list[dict[str, Any]]) -> tuple[dict, list]:
        raw = client.chat.completions.with_raw_response.create(
            model=self.model, messages=history, tools=self.tools
        )
        message = raw.parse().choices[0].message
        history.append(message.model_dump(exclude_none=True))
        return dict(raw.headers), [c.id for c in message.tool_calls or ()]

    def _append_result(self, history: list[dict[str, Any]], call_id: str, text: str) -> None:
        history.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _first_result(self, history: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
        return next(m for m in history if m["role"] == "tool"), "content"

    def refuse_longer_than(self, length: int) -> None:
        self.providers.chat.max_messages = length

    def bad_bodies(self) -> list[tuple[bytes, str]]:
        robot = [{"role": "robot", "content": "hi"}]
        orphan = [{"role": "tool", "content": "x"}]
        return [
            (b"{not json", ""),
            (_json({"model": self.model, "messages": robot}), "messages[0].role"),
            (_json({"model": self.model, "messages": orphan}), "messages[0].tool_call_id"),
        ]


class ResponsesDriver(_OpenAIDriver):
    name = label = "responses"
    route = "/v1/responses"
    field = "input"
    round_size = 3  # a reasoning item comes with each call
    view = staticmethod(responses_view)
    tools: ClassVar[Any] = [
        {"type": "function", "name": "run_tests", "parameters": {"type": "object"}}
    ]
    developer: ClassVar[Any] = {
        "type": "message",
        "role": "developer",
        "content": "Run the tests after each edit.",
    }

    def new_history(self) -> list[dict[str, Any]]:
        return [dict(self.developer), {"type": "message", "role": "user", "content": TASK}]

    def _round(self, client: openai.OpenAI, history: list[dict[str, Any]]) -> tuple[dict, list]:
        raw = client.responses.with_raw_response.create(
            model=self.model, instructions=PREAMBLE, input=history, tools=self.tools, store=False
        )
        calls = []
        for item in raw.parse().output:  # reasoning items travel back with their calls
            history.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                calls.append(item.call_id)
        return dict(raw.headers), calls

    def _append_result(self, history: list[dict[str, Any]], call_id: str, text: str) -> None:
        history.append({"type": "function_call_output", "call_id": call_id, "output": text})

    def _first_result(self, history: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
        return next(i for i in history if i.get("type") == "function_call_output"), "output"

    def refuse_longer_than(self, length: int) -> None:
        self.providers.responses.max_items = length

    def good_body(self) -> bytes:
        return _json({"model": self.model, "input": self.new_history()})

    def bad_bodies(self) -> list[tuple[bytes, str]]:
        robot = [{"type": "message", "role": "robot", "content": "hi"}]
        number = [{"type": "function_call_output", "call_id": "c", "output": 5}]
        return [
            (b"{not json", ""),
            (_json({"model": self.model, "input": robot}), "input[0].role"),
            (_json({"model": self.model, "input": number}), "input[0].output"),
        ]


class AnthropicDriver(Driver):
    name = "anthropic"
    label = "messages"
    route = "/v1/messages"
    model = "claude-mock-1"
    view = staticmethod(anthropic_view)
    system: ClassVar[Any] = [
        {"type": "text", "text": PREAMBLE, "cache_control": {"type": "ephemeral"}}
    ]
    tools: ClassVar[Any] = [
        {
            "name": "run_tests",
            "description": "Run the test suite",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]

    def new_history(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": TASK}]}]

    def _client(self, key: str, headers: dict[str, str], sent: list[bytes]) -> anthropic.Anthropic:
        assert self.server is not None
        return closed_after_test(
            anthropic.Anthropic(
                base_url=self.server.url,  # as ANTHROPIC_BASE_URL: the SDK adds /v1
                api_key=key,
                max_retries=0,
                default_headers=headers,
                http_client=anthropic.DefaultHttpxClient(event_hooks=self._keeping(sent)),
            )
        )

    def _round(self, client: anthropic.Anthropic, history: list[dict[str, Any]]) -> tuple:
        raw = client.messages.with_raw_response.create(
            model=self.model, max_tokens=256, system=self.system, messages=history, tools=self.tools
        )
        reply = raw.parse()
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        history.append({"role": "assistant", "content": content})
        return dict(raw.headers), [b.id for b in reply.content if b.type == "tool_use"]

    def _append_result(self, history: list[dict[str, Any]], call_id: str, text: str) -> None:
        result = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        history.append({"role": "user", "content": [result]})

    def _first_result(self, history: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
        blocks = (b for m in history for b in m["content"] if isinstance(b, dict))
        return next(b for b in blocks if b.get("type") == "tool_result"), "content"

    def refuse_longer_than(self, length: int) -> None:
        self.providers.anthropic.max_messages = length

    def bad_bodies(self) -> list[tuple[bytes, str]]:
        robot = [{"role": "robot", "content": "hi"}]
        return [
            (b"{not json", ""),
            (_json({"model": self.model, "max_tokens": 16, "messages": robot}), "messages.0.role"),
            (_json({"model": self.model, "max_tokens": 16, "messages": []}), "messages"),
        ]

    def auth(self, key: str) -> dict[str, str]:
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}

    def error_of(self, response: httpx.Response) -> tuple[str, str]:
        """(type, message) of an error in Anthropic's shape; fails on any other shape."""
        body = response.json()
        assert body.keys() == {"type", "error"} and body["type"] == "error", body
        error = body["error"]
        assert {"type", "message"} <= error.keys() and "param" not in error, error
        return error["type"], error["message"]


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


DRIVERS: dict[str, type[Driver]] = {
    d.name: d for d in (ChatDriver, ResponsesDriver, AnthropicDriver)
}
