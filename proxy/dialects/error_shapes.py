"""How an error of ours reads in each provider's API: OpenAI's ``{"error": {...}}`` and
Anthropic's ``{"type": "error", "error": {...}}``. A client's SDK parses what it expects; an
error in the other API's shape would surface as an unreadable one."""

from __future__ import annotations

import json

from proxy.errors import ProxyError

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


def openai_error_body(error: ProxyError) -> bytes:
    return error.to_body()


def anthropic_error_body(error: ProxyError) -> bytes:
    kind = _ANTHROPIC_ERRORS.get(error.status_code)
    if kind is None:
        kind = "invalid_request_error" if error.status_code < 500 else "api_error"
    return json.dumps({"type": "error", "error": {"type": kind, "message": error.message}}).encode()
