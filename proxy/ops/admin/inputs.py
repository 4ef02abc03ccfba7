"""What an admin request says, read and checked: a page of the listing, a posted conversation, a
corrected summary. Each reader raises InvalidRequest (a 400 naming the parameter) when the
request says it wrong, so the routes only route."""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request

from proxy import wirejson
from proxy.core.text import lone_surrogate
from proxy.errors import InvalidRequest

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def page_args(request: Request) -> tuple[int, float | None]:
    """``limit`` and the ``cursor`` to list from (a previous page's ``next_cursor``)."""
    query = request.query_params
    try:
        limit = int(query.get("limit", DEFAULT_PAGE))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(
            f"limit must be a whole number from 1 to {MAX_PAGE}",
            param="limit",
            code="invalid_limit",
        )
    cursor = query.get("cursor")
    if cursor is None:
        return limit, None
    try:
        before = float(cursor)
    except ValueError:
        before = math.nan
    if not math.isfinite(before):
        raise InvalidRequest(
            "cursor must be the next_cursor of a previous page",
            param="cursor",
            code="invalid_cursor",
        )
    return limit, before


async def conversation_body(request: Request) -> dict[str, Any]:
    """A posted chat body: an object with a ``messages`` array (checked further by the planner)."""
    body = wirejson.parse(await request.body())
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise InvalidRequest("the body must be an object with a 'messages' array", param="messages")
    return body


def new_summary(raw: bytes, content_type: str, *, patch: bool) -> tuple[str, str | None]:
    """The corrected text and the checkpoint it corrects (None: the current one)."""
    if content_type.split(";")[0].strip().lower() == "text/plain":
        try:
            text: object = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequest(
                f"the summary is not valid UTF-8 (byte {exc.start})",
                param="summary",
                code="invalid_summary",
            ) from exc
        target: object = None
    else:
        body = wirejson.parse(raw)
        allowed = {"summary", "checkpoint"} if patch else {"summary"}
        if not isinstance(body, dict) or not set(body) <= allowed:
            raise InvalidRequest(
                "the body must be an object with 'summary'"
                + (" and optionally 'checkpoint'" if patch else "; PATCH names a 'checkpoint'"),
                param="summary",
                code="invalid_body",
            )
        text, target = body.get("summary"), body.get("checkpoint")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(
            "summary must be a non-empty string", param="summary", code="invalid_summary"
        )
    at = lone_surrogate(text)
    if at is not None:  # valid JSON ("\\ud800"), but no text a summary can be stored or sent as
        raise InvalidRequest(
            f"the summary holds a lone surrogate (U+{ord(text[at]):04X}) at character {at}: "
            "it must be Unicode text",
            param="summary",
            code="invalid_summary",
        )
    if target is not None and (not isinstance(target, str) or not target):
        raise InvalidRequest(
            "checkpoint must be a checkpoint id", param="checkpoint", code="invalid_checkpoint"
        )
    return text.strip(), target
