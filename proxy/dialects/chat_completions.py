"""``POST /v1/chat/completions``: the neutral model is this dialect's own message list, so
translating is checking, and rendering is the plan's messages in the client's body."""

from __future__ import annotations

from typing import Any

from proxy import wirejson
from proxy.core.facts import FactLookup
from proxy.core.messages import validate_messages
from proxy.core.plan import Plan
from proxy.core.resent import ParsedBody, parse_body
from proxy.dialects.base import Neutral
from proxy.dialects.chat_recall import CHAT_RECALL
from proxy.dialects.error_shapes import openai_error_body
from proxy.dialects.summary_calls import chat_answer_text, chat_summary_call
from proxy.errors import InvalidRequest, ProxyError


def parse_chat_body(raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
    """Parse and check the parts every chat completion needs; anything else is the provider's.
    ``follow``: its history located, and the items it begins with of ``last``'s (the
    conversation's previous body) taken as parsed (``proxy.core.resent``)."""
    parsed = parse_body(raw, "messages", last) if follow else ParsedBody(wirejson.parse(raw))
    body = parsed.value
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_type")
    if "messages" not in body:
        raise InvalidRequest(
            "'messages' is required", param="messages", code="missing_required_parameter"
        )
    if not isinstance(body["messages"], list):
        raise InvalidRequest("'messages' must be an array", param="messages", code="invalid_type")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidRequest("'model' must be a string", param="model", code="invalid_type")
    return parsed


class ChatCompletions:
    """Translates chat completions bodies (the neutral model's own shape)."""

    name = "chat"
    history_field = "messages"
    cache_key_field = "prompt_cache_key"
    records = True
    native = None  # chat completions has no context management of the provider's
    recall = CHAT_RECALL  # the recall tool in this dialect's shape

    def parse(self, raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
        return parse_chat_body(raw, last, follow)

    def conversation(
        self,
        body: dict[str, Any],
        *,
        facts: FactLookup | None = None,
        parsed: ParsedBody | None = None,
    ) -> Neutral:
        messages = body["messages"]
        # The facts of the items taken from the last body come with them, and are kept for the
        # next (only the body's own history: a caller may hand in another list).
        own = parsed if parsed is not None and parsed.items is messages else None
        known = own.facts if own is not None else None
        return Neutral(
            validate_messages(messages, facts=facts, known=known), body.get("tools"), own
        )

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        return {**body, "messages": plan.messages}

    def summary_call(
        self, sent: dict[str, Any], instruction: str, max_tokens: int
    ) -> dict[str, Any]:
        return chat_summary_call(sent, instruction, max_tokens)

    def answer_text(self, answer: dict[str, Any]) -> str | None:
        return chat_answer_text(answer)

    def error_body(self, error: ProxyError) -> bytes:
        return openai_error_body(error)


CHAT = ChatCompletions()
