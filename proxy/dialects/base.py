"""What a wire dialect provides, and the neutral conversation it translates to.

The neutral model is the core's (``proxy.core``): chat-shaped message dicts with ``role``
(system, developer, user, assistant, tool), ``content`` (a string or text/image parts, what is
counted), ``tool_calls`` (``id`` + function name and arguments) and ``tool_call_id``. A dialect
whose wire items are not chat messages (Responses API items, Anthropic content blocks) puts on
each neutral message it builds two private keys the core carries along untouched:

- ``_wire``: the list of wire items this message stands for. Rendering walks the plan's messages
  and puts each message's ``_wire`` back unchanged (one list shared by several neutral messages,
  such as one Anthropic user message holding three tool results, is put back once).
- ``_hash``: what of those items reaches the model (without cache hints that clients move from
  turn to turn), hashed into the checkpoint chain next to the chat fields.

A message without ``_wire`` in a plan was injected by the planner: the summary or a notice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.config.settings import Settings
from proxy.core.checkpoints import DIALECT_FIELD
from proxy.core.planner import Plan
from proxy.errors import ProxyError
from proxy.proxying.headers import request_headers_upstream
from proxy.proxying.relay import upstream_url
from proxy.state.tenancy import Credentials, credential_headers
from proxy.types import RawHeaders, Scope

WIRE = "_wire"
HASHED = DIALECT_FIELD  # "_hash"


@dataclass(frozen=True)
class Neutral:
    """A request's conversation in the core's model."""

    messages: list[dict[str, Any]]
    tools: object = None  # tool schemas, counted as part of the prompt


class Dialect(Protocol):
    """One wire dialect (chat completions, Responses API, Anthropic Messages)."""

    name: str  # the route label of metrics and logs
    history_field: str  # the body field holding the conversation, named in errors

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The parsed body; InvalidRequest when no request of this dialect could be valid."""
        ...

    def conversation(self, body: dict[str, Any]) -> Neutral | None:
        """The conversation to compact; None when the body is not compactable as it is (the
        provider holds the history): forwarded unchanged, ``X-Compaction: off``."""
        ...

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        """The body to send for ``plan`` (made from ``conversation(body)``)."""
        ...

    def error_body(self, error: ProxyError) -> bytes:
        """An error of ours in this dialect's shape."""
        ...

    def upstream_url(self, settings: Settings, scope: Scope) -> str: ...

    def upstream_headers(
        self,
        headers: RawHeaders,
        settings: Settings,
        *,
        own_headers: frozenset[bytes],
        drop_content_length: bool = False,
    ) -> RawHeaders:
        """The client's headers as the provider should see them (auth replaced when the proxy
        holds the provider's key)."""
        ...

    def caller_credentials(self, headers: Mapping[str, str], settings: Settings) -> Credentials:
        """The caller's credential headers that calls made on the caller's behalf (a summary,
        window discovery) may send to the OpenAI-compatible upstream (``headers``: lower-cased
        names); empty when the caller's key belongs to another provider."""
        ...


# Every Anthropic client sends anthropic-version (the API refuses a request without it), and
# only Anthropic's API reads these. ``x-api-key`` alone says nothing: OpenAI-compatible gateways
# take it too (docs/dialects.md).
_ANTHROPIC_HEADERS = frozenset({b"anthropic-version", b"anthropic-beta"})
_ANTHROPIC_AUTH = frozenset({b"x-api-key", b"authorization"})

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def is_anthropic(headers: RawHeaders) -> bool:
    """The request is one of Anthropic's API, whatever its path (both APIs have /v1/models)."""
    return any(name.lower() in _ANTHROPIC_HEADERS for name, _ in headers)


class AnthropicWire:
    """URL, auth and error shape of Anthropic's API (Messages, and every other path a request
    carrying ``anthropic-version`` takes: models, files, batches)."""

    def error_body(self, error: ProxyError) -> bytes:
        kind = _ANTHROPIC_ERRORS.get(error.status_code)
        if kind is None:
            kind = "invalid_request_error" if error.status_code < 500 else "api_error"
        return json.dumps(
            {"type": "error", "error": {"type": kind, "message": error.message}}
        ).encode()

    def upstream_url(self, settings: Settings, scope: Scope) -> str:
        # The base URL has no /v1 (as the anthropic SDK's): the client's path goes on whole.
        return upstream_url(settings.upstream.anthropic_base_url, scope, strip_prefix="")

    def upstream_headers(
        self,
        headers: RawHeaders,
        settings: Settings,
        *,
        own_headers: frozenset[bytes],
        drop_content_length: bool = False,
    ) -> RawHeaders:
        """The client's headers (``anthropic-version`` and ``anthropic-beta`` among them), with
        ``x-api-key`` replaced when the proxy holds the provider's key."""
        out = request_headers_upstream(
            headers, own_headers=own_headers, api_key=None, drop_content_length=drop_content_length
        )
        key = settings.upstream.anthropic_api_key
        if key is None:
            return out
        kept = [(n, v) for n, v in out if n.lower() not in _ANTHROPIC_AUTH]
        return [*kept, (b"x-api-key", key.get_secret_value().encode("latin-1"))]

    def caller_credentials(self, headers: Mapping[str, str], settings: Settings) -> Credentials:
        """The caller's Anthropic key goes to the summarizer only where the summarizer would
        send it: the OpenAI-compatible upstream, and only when that is the same host as the
        Anthropic upstream (a gateway serving both); never to another provider."""
        if _origin(settings.upstream.base_url) != _origin(settings.upstream.anthropic_base_url):
            return {}
        return credential_headers(headers)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.split('/', 1)[0].lower()}"


ANTHROPIC = AnthropicWire()


class OpenAIWire:
    """URL, auth and error shape of OpenAI's API (chat completions, Responses, pass-through).
    A request carrying Anthropic's headers is Anthropic's on any path: its URL, auth and the
    credentials calls on its behalf may use are Anthropic's (an Anthropic key never goes to the
    OpenAI-compatible upstream); the error shape stays the route's."""

    def error_body(self, error: ProxyError) -> bytes:
        return error.to_body()

    def upstream_url(self, settings: Settings, scope: Scope) -> str:
        if is_anthropic(scope["headers"]):
            return ANTHROPIC.upstream_url(settings, scope)
        return upstream_url(settings.upstream.base_url, scope)

    def upstream_headers(
        self,
        headers: RawHeaders,
        settings: Settings,
        *,
        own_headers: frozenset[bytes],
        drop_content_length: bool = False,
    ) -> RawHeaders:
        if is_anthropic(headers):
            return ANTHROPIC.upstream_headers(
                headers, settings, own_headers=own_headers, drop_content_length=drop_content_length
            )
        key = settings.upstream.api_key
        return request_headers_upstream(
            headers,
            own_headers=own_headers,
            api_key=key.get_secret_value() if key is not None else None,
            drop_content_length=drop_content_length,
        )

    def caller_credentials(self, headers: Mapping[str, str], settings: Settings) -> Credentials:
        if "anthropic-version" in headers or "anthropic-beta" in headers:
            return ANTHROPIC.caller_credentials(headers, settings)
        return credential_headers(headers)


def wire_groups(plan: Plan) -> Iterator[tuple[list[Any] | None, list[dict[str, Any]]]]:
    """The sent messages in order, grouped by the wire list they stand for: (``_wire``, its
    neutral messages); an injected message (no ``_wire``) comes as (None, [message])."""
    current: list[Any] | None = None
    members: list[dict[str, Any]] = []
    for message in plan.messages:
        wire = message.get(WIRE)
        if wire is not None and wire is current:
            members.append(message)
            continue
        if members:
            yield current, members
        current, members = wire, [message]
    if members:
        yield current, members


def cleared_wires(plan: Plan) -> set[int]:
    """ids of the ``_wire`` lists whose tool result the plan replaced by a stub (the stub is
    the neutral message's ``content``)."""
    return {id(plan.source[i][WIRE]) for i in plan.cleared if plan.source[i].get(WIRE) is not None}
