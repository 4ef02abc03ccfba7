"""The ``native`` setups of the cost bench: the proxy under ``strategy: native``, in
front of a provider that applies Anthropic's context management under the bench's caching rules.

``NativeUpstream`` stands between the proxy and the bench's ``CachingProvider`` on the Messages
route (``upstream.anthropic_base_url``); everything else goes to the provider as it came. A request
with ``context_management.edits`` is edited as Anthropic documents the edits
(anthropic-sdk-python 0.121.0 ``types/beta``), then billed by the provider under its cache rules:

- ``clear_tool_uses_20250919``: over its trigger, the results of all but the newest ``keep`` tool
  uses (``exclude_tools`` spared) become a short placeholder, when that frees at least
  ``clear_at_least`` tokens. Stateless, as the API is: recomputed on every request.
- ``compact_20260112``: over its trigger, one summarizing pass over the prompt (billed as a
  summary: the bench's summarizer model, at most ``summarizer.max_summary_tokens`` written, as the
  proxy's own summaries are), then the answer from the system, the summary and the last message.
  The client is played as the SDKs' agent loops behave, sending the compaction block back: later
  requests carrying the same compacted prefix are billed with the summary in its place, until the
  trigger is crossed again.

On chat completions (the ``openai`` rule) no provider offers it: ``native`` runs its fallback,
``summarize``, so those runs measure the fallback.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.app import create_app
from proxy.config.settings import Settings
from tests.bench.cost.prompts import Tokenizer, messages_blocks
from tests.bench.cost.provider import CLOCK_HEADER
from tests.support.servers import ThreadedUvicorn, free_port

CLEARED = "[cleared]"
SUMMARIZE = "Summarize the conversation above for its continuation."
_PASSED = (CLOCK_HEADER, "x-bench-output-tokens", "content-type")


def _digest(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


class NativeUpstream:
    """Anthropic's context management in front of the bench's provider (see the module doc)."""

    def __init__(self, provider: str, *, summarizer: str, summary_tokens: int) -> None:
        self._provider = provider
        self._summarizer = summarizer
        self._summary_tokens = summary_tokens
        self._tokenizer = Tokenizer()
        self._compacted: dict[str, tuple[int, str, str]] = {}  # model -> covered, digest, summary
        self.app = Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    async def _messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        headers = {k: v for k, v in request.headers.items() if k in _PASSED}
        edits = (body.pop("context_management", None) or {}).get("edits") or []
        applied: list[dict[str, Any]] = []
        async with httpx.AsyncClient(base_url=self._provider, timeout=600) as client:
            if edits:
                body = await self._edited(client, body, edits, headers, applied)
            answer = await client.post("/v1/messages", json=body, headers=headers)
        if body.get("stream") or answer.status_code != 200:
            kind = answer.headers.get("content-type", "application/json")
            return Response(answer.content, answer.status_code, media_type=kind)
        return JSONResponse({**answer.json(), "context_management": {"applied_edits": applied}})

    def _tokens(self, body: dict[str, Any]) -> int:
        return sum(self._tokenizer.count(block.text) for block in messages_blocks(body))

    async def _edited(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        edits: list[dict[str, Any]],
        headers: dict[str, str],
        applied: list[dict[str, Any]],
    ) -> dict[str, Any]:
        original = body["messages"]
        model = str(body.get("model"))
        held = self._compacted.get(model)
        if held is not None and _digest(original[: held[0]]) == held[1]:
            body = {**body, "messages": [_summary_message(held[2]), *original[held[0] :]]}
        for edit in edits:
            trigger = (edit.get("trigger") or {}).get("value", 100_000)
            if self._tokens(body) <= trigger:
                continue
            if edit["type"] == "clear_tool_uses_20250919":
                body = self._cleared(body, edit, applied)
            elif edit["type"] == "compact_20260112":
                summary = await self._summary(client, body, headers)
                covered = len(original) - 1
                self._compacted[model] = (covered, _digest(original[:covered]), summary)
                body = {**body, "messages": [_summary_message(summary), original[-1]]}
        return body

    def _cleared(
        self, body: dict[str, Any], edit: dict[str, Any], applied: list[dict[str, Any]]
    ) -> dict[str, Any]:
        keep = (edit.get("keep") or {}).get("value", 3)
        spared = set(edit.get("exclude_tools") or ())
        uses = [
            block["id"]
            for message in body["messages"]
            if message["role"] == "assistant" and isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_use" and block.get("name") not in spared
        ]
        old = set(uses[: max(0, len(uses) - keep)])
        freed, cleared, messages = 0, 0, []
        for message in body["messages"]:
            content = message["content"]
            if message["role"] == "user" and isinstance(content, list):
                blocks = []
                for block in content:
                    stub = block.get("type") == "tool_result" and block["tool_use_id"] in old
                    if stub and block.get("content") != CLEARED:
                        freed += self._tokenizer.count(json.dumps(block.get("content")))
                        cleared += 1
                        block = {**block, "content": CLEARED}
                    blocks.append(block)
                message = {**message, "content": blocks}
            messages.append(message)
        least = (edit.get("clear_at_least") or {}).get("value", 0)
        if not cleared or freed < least:
            return body
        applied.append(
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": cleared,
                "cleared_input_tokens": freed,
            }
        )
        return {**body, "messages": messages}

    async def _summary(
        self, client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> str:
        ask = {"role": "user", "content": [{"type": "text", "text": SUMMARIZE}]}
        request = {
            **{k: v for k, v in body.items() if k != "stream"},
            "model": self._summarizer,
            "max_tokens": self._summary_tokens,
            "messages": [*body["messages"], ask],
        }
        passed = {k: v for k, v in headers.items() if k != "x-bench-output-tokens"}
        answer = await client.post("/v1/messages", json=request, headers=passed)
        return "".join(b.get("text", "") for b in answer.json()["content"])


def _summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"<compaction>{summary}"}]}


class _WithUpstream:
    """The proxy app, with the native upstream served for as long as the proxy lives."""

    def __init__(self, app: Any, upstream: ThreadedUvicorn) -> None:
        self._app = app
        self._upstream = upstream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return

        async def watched() -> Any:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._upstream.__enter__()
            elif message["type"] == "lifespan.shutdown":
                self._upstream.__exit__()
            return message

        await self._app(scope, watched, send)


def native_app(settings: Settings, clock: Any) -> Any:
    """The proxy, its Anthropic upstream the native one (on the port the config names)."""
    provider = settings.upstream.base_url.removesuffix("/v1")
    summarizer = settings.summarizer
    upstream = NativeUpstream(
        provider, summarizer=summarizer.model, summary_tokens=summarizer.max_summary_tokens
    )
    port = urlsplit(settings.upstream.anthropic_base_url).port
    return _WithUpstream(
        create_app(settings, clock=clock), ThreadedUvicorn(upstream.app, port=port)
    )


def _native(over: dict[str, Any]) -> dict[str, Any]:
    return {"upstream": {"anthropic_base_url": f"http://127.0.0.1:{free_port()}"}, **over}


def native_policy(bench: Any) -> dict[str, Any]:
    """The default policy, ``strategy: native``."""
    return _native({"policies": {"default": {"strategy": "native"}}})


def native_recipe(bench: Any) -> dict[str, Any]:
    """config/examples/coding-agent.yaml, ``strategy: native``: its 60k interaction tokens as
    the input trigger (native has no per-interaction trigger), its keep and clearing batch."""
    from tests.bench.cost.setups import coding_agent_recipe

    recipe = coding_agent_recipe(bench)
    for policy in recipe.get("policies", {}).values():
        policy["strategy"] = "native"
        trigger = policy.setdefault("trigger", {})
        trigger["input_tokens"] = trigger.get("interaction_tokens") or trigger.get(
            "input_tokens", 0
        )
    return _native(recipe)


def native_compaction(bench: Any) -> dict[str, Any]:
    """``native_recipe`` without Anthropic's tool-use clearing: the provider's compaction only."""
    recipe = native_recipe(bench)
    for policy in recipe["policies"].values():
        policy["native"] = {"clear_tool_uses": False}
    return recipe


# (name, policy, make_app): the setups registered in tests/bench/cost/setups.py's SETUPS.
NATIVE_SETUPS = (
    ("native", native_policy, native_app),
    ("native recipe", native_recipe, native_app),
    ("native compaction", native_compaction, native_app),
)
