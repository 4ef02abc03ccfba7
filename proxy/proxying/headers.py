"""Which headers cross the proxy, in each direction (RFC 9110 section 7.6.1 on hop-by-hop)."""

from __future__ import annotations

from functools import cache

from proxy.compaction.protocol import PREFIX
from proxy.types import RawHeaders

_OURS = PREFIX.encode()  # X-Compaction*: the proxy's own headers

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"proxy-connection",
    }
)

# Answered at our hop, never forwarded: the server sends the client its "100 Continue" when the
# proxy starts reading the body (uvicorn does, on the first receive). Forwarded, it would make
# the upstream client wait for the provider's 100 before sending the body, and many providers
# send none until they have the body: each such request would hold a connection for ever.
# RFC 9110 section 10.1.1 lets the recipient of an expectation satisfy it.
HANDLED_HERE = frozenset({b"expect"})


def request_headers_upstream(
    headers: RawHeaders,
    *,
    own_headers: frozenset[bytes],
    api_key: str | None,
    drop_content_length: bool = False,
) -> RawHeaders:
    """The client's headers as the provider should see them.

    Drops hop-by-hop headers, Expect (answered here), Host (the provider's host comes from the configured base URL, never
    from the client), the proxy's own headers (X-Conversation-Id, X-Compaction*), and replaces
    Authorization when the proxy holds the provider key. ``own_headers`` are lowercase names.
    """
    drop = _dropped(own_headers, drop_content_length, api_key is not None)
    out: RawHeaders = []
    named: set[bytes] = set()
    for name, value in headers:
        lower = name.lower()
        if lower in drop or lower.startswith(_OURS):
            if lower == b"connection":
                named.update(_tokens(value))
            continue
        out.append((name, value))
    named -= drop  # most often only "keep-alive" or "close": nothing more to drop
    if named:  # a Connection header may name headers sent before it
        out = [(name, value) for name, value in out if name.lower() not in named]
    if api_key is not None:
        out.append((b"authorization", b"Bearer " + api_key.encode("latin-1")))
    return out


@cache
def _dropped(
    own_headers: frozenset[bytes], drop_content_length: bool, replace_auth: bool
) -> frozenset[bytes]:
    """The names never forwarded upstream but those a Connection header names: the same few
    sets for every request, so made once (a route's own headers never change)."""
    drop = HOP_BY_HOP | HANDLED_HERE | own_headers | {b"host"}
    if drop_content_length:
        drop |= {b"content-length"}
    if replace_auth:
        drop |= {b"authorization"}
    return drop


def _tokens(connection: bytes) -> set[bytes]:
    return {token.strip().lower() for token in connection.split(b",") if token.strip()}


def response_headers_downstream(headers: RawHeaders) -> RawHeaders:
    """The provider's headers as the client should see them: all but hop-by-hop."""
    out: RawHeaders = []
    named: set[bytes] = set()
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP:
            if lower == b"connection":
                named.update(_tokens(value))
            continue
        out.append((lower, value))
    named -= HOP_BY_HOP
    if named:  # a Connection header may name headers sent before it
        out = [(name, value) for name, value in out if name not in named]
    return out


def replaced(headers: RawHeaders, own: RawHeaders) -> RawHeaders:
    """``headers`` with ``own`` in place of the client's of the same names (a decision's
    ``anthropic-beta``, its flags merged with the client's by compaction)."""
    if not own:
        return headers
    names = {name.lower() for name, _ in own}
    kept = [(name, value) for name, value in headers if name.lower() not in names]
    return [*kept, *own]
