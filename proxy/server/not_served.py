"""Starlette's own 404 and 405 (no route, a method a route does not take), answered in OpenAI's
error shape like every other answer, with a hint for the most common cause: a client whose base
URL lacks ``/v1``."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from proxy.errors import MethodNotAllowed, NotFound, ProxyError


async def not_served(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 and 405, in OpenAI's error shape like every other answer."""
    assert isinstance(exc, HTTPException)
    where = f"{request.method} {request.url.path}"
    error: ProxyError
    if exc.status_code == 405:
        error = MethodNotAllowed(f"{where}: method not allowed", code="method_not_allowed")
    elif request.url.path.startswith("/v1/") or request.url.path.startswith("/admin/"):
        error = NotFound(f"{where} is not served by this proxy", code="not_found")
    else:  # most likely a client whose base URL lacks /v1
        error = NotFound(
            f"{where} is not served by this proxy: API paths start with /v1, so the "
            "client's base URL must end in /v1 (for example http://localhost:8080/v1)",
            code="not_found",
        )
    return Response(
        error.to_body(),
        status_code=error.status_code,
        headers=exc.headers,
        media_type="application/json",
    )
