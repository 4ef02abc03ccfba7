"""How the admin API answers: JSON written as the request path writes it, errors in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from proxy import wirejson
from proxy.errors import ProxyError
from proxy.state.listing import ConversationInfo

# What the admin API answers holds a tenant's summaries and originals: no cache (a browser's,
# a shared proxy's) keeps it, and no browser reads it as anything but JSON.
HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff"}


class AdminJSON(JSONResponse):
    """An admin answer as the request path writes JSON (``proxy.wirejson``): text that no UTF-8
    encoder takes, a lone surrogate a client sent in a message or a model name, goes out as its
    ``\\u`` escape, as the client sent it, instead of making the answer a 500."""

    def __init__(self, content: Any, status_code: int = 200) -> None:
        super().__init__(content, status_code=status_code, headers=HEADERS)

    def render(self, content: Any) -> bytes:
        return wirejson.encode(content)


def error_response(error: ProxyError) -> Response:
    return Response(
        error.to_body(),
        status_code=error.status_code,
        media_type="application/json",
        headers=HEADERS,
    )


def describe_info(info: ConversationInfo) -> dict[str, Any]:
    """One conversation of the listing, as the API shows it."""
    return {
        "conversation_id": info.conversation_id,
        "checkpoints": info.checkpoints,
        "covered_messages": info.covered,
        "bytes": info.bytes,
        "last_used_at": info.last_used,
        "updated_at": info.updated_at,
        "expires_in_seconds": info.ttl_seconds,
    }
