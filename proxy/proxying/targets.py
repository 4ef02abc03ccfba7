"""Where a request goes and with whose key: the upstream URL, the provider's key put in place
of the caller's, and which of the caller's credentials calls made on its behalf may use.

Two provider APIs are served: OpenAI's (chat completions, Responses, every other path under /v1)
and Anthropic's (Messages, and every request carrying Anthropic's headers, whatever its path:
both APIs have /v1/models). An Anthropic key never goes to the OpenAI-compatible upstream
(docs/dialects.md). A route holds the target of its API and asks it once per request
which target the request's headers make it (``resolve``).
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import unquote

from proxy.config.settings import UpstreamSettings
from proxy.dialects.error_shapes import anthropic_error_body, openai_error_body
from proxy.errors import InvalidRequest, ProxyError
from proxy.proxying.headers import request_headers_upstream
from proxy.state.tenancy import Credentials, credential_headers
from proxy.types import HeaderView, RawHeaders, Scope

# Every Anthropic client sends anthropic-version (the API refuses a request without it), and
# only Anthropic's API reads these. ``x-api-key`` alone says nothing: OpenAI-compatible gateways
# take it too (docs/dialects.md).
_ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
_ANTHROPIC_AUTH = frozenset({b"x-api-key", b"authorization"})


def upstream_url(base_url: str, scope: Scope, *, strip_prefix: str = "/v1") -> str:
    """base_url + the request path after /v1 + the query string, from the ASGI scope only.

    The host always comes from the configured base URL; the client's Host header, an
    absolute-form request target or a body field cannot change it. Dot segments are refused so
    a path cannot climb out of the base URL's path once a client library normalises it.
    """
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    path = raw_path.decode("latin-1")
    if path.startswith(strip_prefix):
        path = path[len(strip_prefix) :]
    decoded = unquote(path)
    if "\\" in decoded or any(seg in (".", "..") for seg in decoded.split("/")):
        raise InvalidRequest("the request path may not contain dot segments", code="invalid_path")
    url = base_url.rstrip("/") + path
    query: bytes = scope.get("query_string", b"")
    if query:
        url += "?" + query.decode("latin-1")
    return url


def is_anthropic(headers: HeaderView) -> bool:
    """The request is one of Anthropic's API, whatever its path."""
    return any(name in headers for name in _ANTHROPIC_HEADERS)


class Target(Protocol):
    """One provider API as the proxy reaches it."""

    def resolve(self, headers: HeaderView) -> Target:
        """The target a request with these headers goes to (this one, or Anthropic's)."""
        ...

    def url(self, scope: Scope) -> str:
        """The upstream URL of the request in ``scope``; InvalidRequest for a bad path."""
        ...

    def headers(self, headers: HeaderView, *, drop_content_length: bool = False) -> RawHeaders:
        """The client's headers as the provider should see them (the caller's key replaced
        when the proxy holds the provider's)."""
        ...

    def caller_credentials(self, headers: HeaderView) -> Credentials:
        """The caller's credential headers that calls made on the caller's behalf (a summary,
        window discovery) may send to the OpenAI-compatible upstream; empty when the caller's
        key belongs to another provider."""
        ...

    def error_body(self, error: ProxyError) -> bytes:
        """An error of ours in this API's shape (a pass-through route has no dialect)."""
        ...


class AnthropicTarget:
    """Anthropic's API: its base URL (no /v1: the client's path goes on whole, as the anthropic
    SDK sends it), ``x-api-key`` auth and error shape."""

    def __init__(self, upstream: UpstreamSettings, *, own_headers: frozenset[bytes]) -> None:
        self._upstream = upstream
        self._own_headers = own_headers

    def resolve(self, headers: HeaderView) -> Target:
        return self

    def url(self, scope: Scope) -> str:
        return upstream_url(self._upstream.anthropic_base_url, scope, strip_prefix="")

    def headers(self, headers: HeaderView, *, drop_content_length: bool = False) -> RawHeaders:
        """The client's headers (``anthropic-version`` and ``anthropic-beta`` among them), with
        ``x-api-key`` replaced when the proxy holds the provider's key."""
        out = request_headers_upstream(
            headers.raw,
            own_headers=self._own_headers,
            api_key=None,
            drop_content_length=drop_content_length,
        )
        key = self._upstream.anthropic_api_key
        if key is None:
            return out
        kept = [(n, v) for n, v in out if n.lower() not in _ANTHROPIC_AUTH]
        return [*kept, (b"x-api-key", key.get_secret_value().encode("latin-1"))]

    def caller_credentials(self, headers: HeaderView) -> Credentials:
        """The caller's Anthropic key goes to the summarizer only where the summarizer would
        send it: the OpenAI-compatible upstream, and only when that is the same host as the
        Anthropic upstream (a gateway serving both); never to another provider."""
        if _origin(self._upstream.base_url) != _origin(self._upstream.anthropic_base_url):
            return {}
        return credential_headers(headers.values)

    def error_body(self, error: ProxyError) -> bytes:
        return anthropic_error_body(error)


class OpenAITarget:
    """OpenAI's API (chat completions, Responses, pass-through): its base URL, bearer auth and
    error shape. A request carrying Anthropic's headers resolves to ``anthropic`` on any path:
    its URL, auth and the credentials calls on its behalf may use are Anthropic's; a compacted
    route's error shape stays its dialect's."""

    def __init__(
        self,
        upstream: UpstreamSettings,
        *,
        own_headers: frozenset[bytes],
        anthropic: AnthropicTarget,
    ) -> None:
        self._upstream = upstream
        self._own_headers = own_headers
        self._anthropic = anthropic

    def resolve(self, headers: HeaderView) -> Target:
        return self._anthropic if is_anthropic(headers) else self

    def url(self, scope: Scope) -> str:
        return upstream_url(self._upstream.base_url, scope)

    def headers(self, headers: HeaderView, *, drop_content_length: bool = False) -> RawHeaders:
        key = self._upstream.api_key
        return request_headers_upstream(
            headers.raw,
            own_headers=self._own_headers,
            api_key=key.get_secret_value() if key is not None else None,
            drop_content_length=drop_content_length,
        )

    def caller_credentials(self, headers: HeaderView) -> Credentials:
        return credential_headers(headers.values)

    def error_body(self, error: ProxyError) -> bytes:
        return openai_error_body(error)


def targets(
    upstream: UpstreamSettings, *, own_headers: frozenset[bytes]
) -> tuple[OpenAITarget, AnthropicTarget]:
    """OpenAI's and Anthropic's targets for these upstream settings; ``own_headers``: the
    proxy's own request headers (lower-case), never forwarded."""
    anthropic = AnthropicTarget(upstream, own_headers=own_headers)
    return OpenAITarget(upstream, own_headers=own_headers, anthropic=anthropic), anthropic


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.split('/', 1)[0].lower()}"
