"""The proxy's one exception tree, and the one place that turns it into OpenAI-shaped errors.

    ProxyError
    ├── ClientError                 the request is wrong: a 4xx, nothing forwarded, nothing stored
    │   ├── InvalidRequest          400 (invalid JSON, wrong types, bad conversation id, ...)
    │   │   └── InvalidMessage      400 naming the message index and field
    │   ├── NotFound                404
    │   ├── MethodNotAllowed        405
    │   ├── RequestTimeout          408 (headers or body too slow)
    │   ├── PayloadTooLarge         413
    │   ├── HeadersTooLarge         431
    │   └── Unauthorized            401 (admin API)
    ├── Overloaded                  503: more connections than server.max_connections
    ├── UpstreamError               the provider could not be reached
    │   ├── UpstreamUnavailable     502
    │   └── UpstreamTimeout         504
    ├── SummarizerError             a summary could not be made (callers fail open)
    ├── StoreError                  the state store failed (callers fail open)
    ├── ExportError                 a summary could not be exported (counted, logged; fail open)
    ├── EvaluationError             ``eval``: a call to the model under test or the judge failed
    └── ConfigError                 the configuration cannot be used (at startup: the CLI exits 2)

Foreign exceptions (httpx, aiohttp, redis, json) are mapped into this tree at the boundary where
they occur, with ``raise ... from exc``.
"""

from __future__ import annotations

import json


class ProxyError(Exception):
    status_code = 500
    error_type = "proxy_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_body(self) -> bytes:
        """The error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""
        error = {
            "message": self.message,
            "type": self.error_type,
            "param": self.param,
            "code": self.code,
        }
        return json.dumps({"error": error}).encode()


class ClientError(ProxyError):
    status_code = 400
    error_type = "invalid_request_error"


class InvalidRequest(ClientError):
    pass


class InvalidMessage(InvalidRequest):
    """A chat message is malformed; ``index`` and ``field`` say where."""

    def __init__(self, index: int, field: str, problem: str) -> None:
        super().__init__(
            f"messages[{index}].{field}: {problem}" if field else f"messages[{index}]: {problem}",
            param=f"messages[{index}].{field}" if field else f"messages[{index}]",
            code="invalid_message",
        )
        self.index = index
        self.field = field


class NotFound(ClientError):
    status_code = 404


class MethodNotAllowed(ClientError):
    status_code = 405


class PayloadTooLarge(ClientError):
    status_code = 413


class RequestTimeout(ClientError):
    status_code = 408


class HeadersTooLarge(ClientError):
    status_code = 431


class Overloaded(ProxyError):
    status_code = 503
    error_type = "server_error"


class Unauthorized(ClientError):
    status_code = 401
    error_type = "authentication_error"


class UpstreamError(ProxyError):
    status_code = 502
    error_type = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    status_code = 502


class UpstreamTimeout(UpstreamError):
    status_code = 504


class SummarizerError(ProxyError):
    error_type = "summarizer_error"


class StoreError(ProxyError):
    error_type = "store_error"


class ExportError(ProxyError):
    error_type = "export_error"


class EvaluationError(ProxyError):
    error_type = "evaluation_error"


class ConfigError(ProxyError):
    """The configuration cannot be used; the message names the key (and line) at fault."""

    error_type = "config_error"
