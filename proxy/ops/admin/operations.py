"""The admin routes over a conversation's stored state: list, correct a summary, restore.

- ``GET /admin/conversations?limit=&cursor=``: the tenant's conversations, most recently used
  first, from the store's listing index.
- ``PUT /admin/conversations/{id}/summary``: a corrected text for the current summary;
  ``PATCH`` may name the checkpoint to correct (``"checkpoint"``). Either writes a new checkpoint
  over the same messages as the one corrected (its child), which becomes current; the old one
  stays in the history.
- ``POST /admin/conversations/{id}/checkpoints/{cid}/restore``: make an older checkpoint current.

``proxy.ops.admin.routes`` mounts these behind its token and tenant check; ``proxy.core.history`` holds the
rules, ``Store.change`` writes them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from proxy import wirejson
from proxy.config.settings import Settings
from proxy.core import history
from proxy.core.checkpoints import Checkpoint, Record
from proxy.core.plan_view import describe_checkpoint
from proxy.core.summary_message import (
    BYTES_PER_TOKEN,
    escape_tags,
    summary_token_cap,
)
from proxy.core.text import lone_surrogate
from proxy.core.tokens import TokenCounter
from proxy.errors import InvalidRequest, NotFound, PayloadTooLarge
from proxy.state.conversations import Store
from proxy.state.listing import ConversationInfo

Handler = Callable[[Request, str], Awaitable[Response]]
DEFAULT_PAGE = 100
MAX_PAGE = 1000


class AdminJSON(JSONResponse):
    """An admin answer as the request path writes JSON (``proxy.wirejson``): text that no UTF-8
    encoder takes, a lone surrogate a client sent in a message or a model name, goes out as its
    ``\\u`` escape, as the client sent it, instead of making the answer a 500 (issue 17)."""

    def render(self, content: Any) -> bytes:
        return wirejson.encode(content)


def _describe_info(info: ConversationInfo) -> dict[str, Any]:
    return {
        "conversation_id": info.conversation_id,
        "checkpoints": info.checkpoints,
        "covered_messages": info.covered,
        "bytes": info.bytes,
        "last_used_at": info.last_used,
        "updated_at": info.updated_at,
        "expires_in_seconds": info.ttl_seconds,
    }


def _page_args(request: Request) -> tuple[int, float | None]:
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


def _new_summary(raw: bytes, content_type: str, *, patch: bool) -> tuple[str, str | None]:
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


def state_routes(
    settings: Settings,
    store: Store,
    counter: TokenCounter,
    endpoint: Callable[[Handler], Callable[[Request], Awaitable[Response]]],
    conversation_id: Callable[[Request], str],
) -> list[BaseRoute]:
    summarizer = settings.summarizer
    cap_tokens = summary_token_cap(summarizer.max_summary_tokens)  # as for a summarizer's text

    async def listing(request: Request, tenant: str) -> Response:
        limit, before = _page_args(request)
        page = await store.list_conversations(tenant, limit=limit, before=before)
        cursor = None if page.next_before is None else repr(page.next_before)
        return AdminJSON(
            {
                "object": "list",
                "data": [_describe_info(info) for info in page.conversations],
                "has_more": cursor is not None,
                "next_cursor": cursor,
            }
        )

    def checked(text: str) -> tuple[str, int]:
        """The text as stored (tags escaped, as a summarizer's) and its tokens; 413 over the cap
        a summarizer's text is cut to."""
        text = escape_tags(text)
        if len(text.encode()) > cap_tokens * BYTES_PER_TOKEN:
            tokens = cap_tokens + 1  # not worth counting
        else:
            tokens = counter.count_text(text, summarizer.model)
        if tokens > cap_tokens:
            raise PayloadTooLarge(
                f"the summary is over {cap_tokens} tokens (2 x summarizer.max_summary_tokens "
                "+ 1024), the most a summary may hold",
                param="summary",
                code="summary_too_large",
            )
        return text, tokens

    async def edit_summary(request: Request, tenant: str, *, patch: bool) -> Response:
        cid = conversation_id(request)
        text, target_id = _new_summary(
            await request.body(), request.headers.get("content-type", ""), patch=patch
        )
        text, tokens = checked(text)
        made: list[Checkpoint] = []

        def correct(record: Record) -> Record:
            target = record.get(target_id) if target_id else history.current(record)
            if target is None:
                raise NotFound("no such checkpoint", param="checkpoint", code="not_found")
            now = time.time()
            fixed = history.corrected(target, text, summary_tokens=tokens, created_at=now)
            made[:] = [fixed]
            return history.correct(
                record, target.id, fixed, now=now, max_checkpoints=settings.store.max_checkpoints
            )

        record = await store.change(tenant, cid, correct)
        if record is None:
            raise NotFound("no such conversation", code="not_found")
        return AdminJSON(
            {"checkpoint": describe_checkpoint(made[0]), "corrects": made[0].parent_id}
        )

    async def put_summary(request: Request, tenant: str) -> Response:
        return await edit_summary(request, tenant, patch=False)

    async def patch_summary(request: Request, tenant: str) -> Response:
        return await edit_summary(request, tenant, patch=True)

    async def restore(request: Request, tenant: str) -> Response:
        checkpoint_id = request.path_params["checkpoint_id"]

        def restored(record: Record) -> Record:
            try:
                return history.restore(record, checkpoint_id)
            except history.UnknownCheckpoint:
                raise NotFound("no such checkpoint", code="not_found") from None

        record = await store.change(tenant, conversation_id(request), restored)
        if record is None:
            raise NotFound("no such conversation", code="not_found")
        return AdminJSON(
            {"current": checkpoint_id, "retired": sorted(record.retired)},
        )

    return [
        Route("/conversations", endpoint(listing), methods=["GET"]),
        Route(
            "/conversations/{conversation_id:path}/checkpoints/{checkpoint_id}/restore",
            endpoint(restore),
            methods=["POST"],
        ),
        Route(
            "/conversations/{conversation_id:path}/summary", endpoint(put_summary), methods=["PUT"]
        ),
        Route(
            "/conversations/{conversation_id:path}/summary",
            endpoint(patch_summary),
            methods=["PATCH"],
        ),
    ]
