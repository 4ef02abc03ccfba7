"""Which headers cross the proxy, in each direction (RFC 9110 section 7.6.1 on hop-by-hop)."""

from __future__ import annotations

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


def _connection_named(headers: RawHeaders) -> set[bytes]:
    """Headers listed in Connection are hop-by-hop too."""
    named: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return named


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
    drop = HOP_BY_HOP | HANDLED_HERE | _connection_named(headers) | own_headers | {b"host"}
    if drop_content_length:
        drop = drop | {b"content-length"}
    if api_key is not None:
        drop = drop | {b"authorization"}
    out = [
        (name, value)
        for name, value in headers
        if (lower := name.lower()) not in drop and not lower.startswith(_OURS)
    ]
    if api_key is not None:
        out.append((b"authorization", b"Bearer " + api_key.encode("latin-1")))
    return out


def response_headers_downstream(headers: RawHeaders) -> RawHeaders:
    """The provider's headers as the client should see them: all but hop-by-hop."""
    drop = HOP_BY_HOP | _connection_named(headers)
    return [(name.lower(), value) for name, value in headers if name.lower() not in drop]


def replaced(headers: RawHeaders, own: RawHeaders) -> RawHeaders:
    """``headers`` with ``own`` in place of the client's of the same names (a decision's
    ``anthropic-beta``, its flags merged with the client's by compaction)."""
    if not own:
        return headers
    names = {name.lower() for name, _ in own}
    kept = [(name, value) for name, value in headers if name.lower() not in names]
    return [*kept, *own]
