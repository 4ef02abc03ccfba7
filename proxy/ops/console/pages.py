"""The console's files, served at /admin/ui with headers that forbid anything but them.

The pages hold no data and no secret: everything they show comes from the admin API, which the
page's own script calls with the admin token the operator typed (kept in the tab's
sessionStorage, sent as a header, never in a URL). So the files themselves are served without
the token, only where the admin API is mounted (``admin.token`` set), and a wrong token sees
an empty page. No build step and no third-party code: plain HTML, CSS and JavaScript modules
from the package (``static/``, package data in pyproject.toml), read once when the app is built.

The Content-Security-Policy allows scripts, styles and fetches from this origin only: no inline
script or style, no other host, no frames, no form posting anywhere, so text from a
conversation can never run as code even if it reached the page as markup.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from proxy.errors import NotFound
from proxy.ops.admin.responses import error_response

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
    "cross-origin-opener-policy": "same-origin",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """Every file of ``static/``: its bytes and media type, by name (the names the console
    serves: nothing else under /admin/ui is a file)."""
    folder = resources.files(__package__).joinpath("static")
    files = {}
    for item in folder.iterdir():
        kind = _TYPES.get("." + item.name.rpartition(".")[2])
        if item.is_file() and kind is not None:
            files[item.name] = (item.read_bytes(), kind)
    return files


def console_routes() -> list[BaseRoute]:
    """The routes to add to the admin router: ``/ui`` (to ``/ui/``), ``/ui/`` and its files."""
    files = static_files()
    # Revalidated on every load (no-cache), answered 304 while the package's file is the same.
    tags = {name: f'"{hashlib.sha256(body).hexdigest()[:20]}"' for name, (body, _) in files.items()}

    def served(request: Request, name: str) -> Response:
        if name not in files:
            return error_response(NotFound(f"no console file named {name!r}", code="not_found"))
        headers = {**HEADERS, "etag": tags[name]}
        if tags[name] in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        body, kind = files[name]
        return Response(body, media_type=kind, headers=headers)

    async def to_folder(request: Request) -> Response:
        # Relative links in the page resolve against /admin/ui/, wherever the proxy is mounted.
        return RedirectResponse("ui/", status_code=308, headers=HEADERS)

    async def index(request: Request) -> Response:
        return served(request, "index.html")

    async def asset(request: Request) -> Response:
        return served(request, request.path_params["name"])

    return [
        Route("/ui", to_folder, methods=["GET", "HEAD"]),
        Route("/ui/", index, methods=["GET", "HEAD"]),
        Route("/ui/{name}", asset, methods=["GET", "HEAD"]),
    ]
