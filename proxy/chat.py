"""A chat completion request as the proxy sees it, and the hook where compaction plugs in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from proxy import wirejson
from proxy.errors import InvalidRequest
from proxy.upstream.base import RawHeaders


@dataclass(frozen=True)
class ChatRequest:
    """A client's chat completion request. The body is parsed on first use only: a request the
    headers alone send through untouched (``X-Compaction: off``, no conversation) is forwarded
    as the bytes that came, without paying for JSON (issue 9)."""

    raw: bytes  # the body exactly as the client sent it
    headers: RawHeaders  # the client's request headers, as received

    @cached_property
    def body(self) -> dict[str, Any]:
        """The parsed, checked body (do not mutate: rewrites build a new one); raises
        InvalidRequest for a body every chat completion would refuse."""
        return parse_chat_body(self.raw)


@dataclass(frozen=True)
class Outgoing:
    body: bytes  # what the provider receives
    response_headers: RawHeaders = field(default_factory=list)  # added to the client's response
    # Run once the response has been relayed (schedules ahead-of-time work; must not block).
    after: Callable[[], None] | None = None
    # After a context-overflow answer: the request to send instead (once), or None.
    retry: Callable[[], Awaitable[Outgoing | None]] | None = None
    # Shown the provider's answer once it has ended (status, headers, the end of its body, or
    # the whole error body of an overflow answer): learns windows and calibrates token counts.
    observe: Callable[[int, RawHeaders, bytes], None] | None = None


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    """Parse and check the parts every chat completion needs; anything else is the provider's."""
    body = wirejson.parse(raw)
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
    return body


class ChatRewriter(Protocol):
    """The compaction hook: turns a client's chat request into what the provider receives."""

    def untouched(self, headers: RawHeaders) -> RawHeaders | None:
        """When the request headers alone say the body goes out as it came: the headers to add
        to the client's response (the body is then streamed through, never read whole).
        None: the body is read and given to ``rewrite``."""
        ...

    async def rewrite(self, request: ChatRequest) -> Outgoing: ...
