"""The admin API under /admin, behind ``admin.token`` (absent when unset): its routes.

Each route reads its request (``inputs``), checks who asks (``auth``), calls one operation (the
store, ``corrections``, ``compacting``) and answers (``responses``); nothing else happens here.

- ``GET /admin/conversations?limit=&cursor=``: the tenant's conversations, most recently used
  first, from the store's listing index, each with its ledger.
- ``GET /admin/ui/``: the operator console (``proxy.ops.console``), pages that call these routes.
- ``GET`` / ``DELETE /admin/conversations/{id}``: a conversation's checkpoints; forget it
  (its ledger too).
- ``GET /admin/conversations/{id}/ledger``: what the conversation cost and saved,
  kept from its first answered request on, summarized or not (apart from the checkpoints, whose
  view a request must not change).
- ``GET /admin/conversations/{id}/timeline``: its last answered requests, one point each
  (``proxy.compaction.money.books``), for the console.
- ``GET /admin/conversations/{id}/originals``: what compaction removed and the proxy keeps for
  recall, oldest first, by handle; 404 when nothing is kept.
- ``GET /admin/conversations/{id}/checkpoints/{cid}``: one checkpoint.
- ``PUT /admin/conversations/{id}/summary``: a corrected text for the current summary;
  ``PATCH`` may name the checkpoint to correct (``"checkpoint"``).
- ``POST /admin/conversations/{id}/checkpoints/{cid}/restore``: make an older checkpoint current.
- ``POST /admin/conversations/{id}/compact``: summarize now; ``POST /admin/preview``: a dry run.

A conversation id may hold ``/``; in an admin path it is sent percent-encoded (``%2F``), and the
routes match the path as sent (``EncodedIds``), so ``x%2Fcheckpoints%2Fzz`` names that
conversation rather than checkpoint ``zz`` of ``x``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.compaction.compactor import Compactor
from proxy.compaction.money import books
from proxy.compaction.money.spending import ledger_view
from proxy.config.ops import AdminSettings
from proxy.config.sections import SummarizerSettings
from proxy.config.store import ConversationSettings
from proxy.core.plan_view import describe_checkpoint, describe_plan, describe_record
from proxy.core.tokens import TokenCounter
from proxy.dialects.base import Dialect
from proxy.errors import NotFound, ProxyError, StoreError
from proxy.ops.admin import inputs
from proxy.ops.admin.auth import AdminAuth, caller_credentials
from proxy.ops.admin.compacting import AdminCompaction
from proxy.ops.admin.corrections import Corrections
from proxy.ops.admin.responses import AdminJSON, describe_info, error_response
from proxy.ops.console.pages import console_routes
from proxy.state.conversations import Store
from proxy.state.tenancy import Tenancy, validate_conversation_id

Handler = Callable[[Request, str], Awaitable[Response]]


class EncodedIds:
    """Routes the admin API on the path as the client sent it, escapes undecoded.

    uvicorn decodes ``%2F`` into ``scope["path"]``, where it is one more separator: an id with
    ``/`` sent encoded would be split like an unencoded one, and ``x/checkpoints/zz`` could never be
    read. Matched on the raw path, an escape stays inside its path parameter, which the
    handler decodes. An unencoded ``/`` still separates, so older scripts' paths route as before.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            sent = raw.decode("latin-1")
            # Only when it is the same path (no root_path or rewrite in between).
            if unquote(sent) == scope["path"]:
                scope = {**scope, "path": sent}
        await self.app(scope, receive, send)


def admin_app(
    settings: AdminSettings,
    *,
    store: Store,
    compactor: Compactor,
    tenancy: Tenancy,
    conversation: ConversationSettings,
    summarizer: SummarizerSettings,
    max_checkpoints: int,
    counter: TokenCounter,
    dialect: Dialect,
) -> ASGIApp:
    """The admin API to mount at /admin: its routes matched on the raw path. ``dialect`` reads
    the bodies posted to preview and compact (the app passes chat completions')."""
    if settings.token is None:
        return EncodedIds(Router([]))
    auth = AdminAuth(settings, tenancy=tenancy, conversation=conversation)
    corrections = Corrections(
        store, counter, summarizer=summarizer, max_checkpoints=max_checkpoints
    )
    compaction = AdminCompaction(compactor, dialect=dialect)
    routes = admin_routes(auth, store, corrections, compaction)
    return EncodedIds(Router([*routes, *console_routes()]))


def _conversation_id(request: Request) -> str:
    # Matched on the raw path (EncodedIds): decoded here. Checkpoint ids are hex, never escaped.
    return validate_conversation_id(unquote(request.path_params["conversation_id"]))


def admin_routes(
    auth: AdminAuth, store: Store, corrections: Corrections, compaction: AdminCompaction
) -> list[BaseRoute]:
    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """One place for auth and the error shape."""

        async def run(request: Request) -> Response:
            try:
                return await handler(request, auth.tenant(request))
            except StoreError as exc:
                return error_response(
                    ProxyError(f"the store cannot answer: {exc.message}", code="store_unavailable")
                )
            except ProxyError as exc:
                return error_response(exc)

        return run

    async def listing(request: Request, tenant: str) -> Response:
        limit, before = inputs.page_args(request)
        page = await store.list_conversations(tenant, limit=limit, before=before)
        cursor = None if page.next_before is None else repr(page.next_before)
        ids = [info.conversation_id for info in page.conversations]
        ledgers = await store.ledgers.inspect_many(tenant, ids)  # one store call for the page
        return AdminJSON(
            {
                "object": "list",
                "data": [
                    {**describe_info(info), "ledger": ledger_view(entry)}
                    for info, entry in zip(page.conversations, ledgers, strict=True)
                ],
                "has_more": cursor is not None,
                "next_cursor": cursor,
            }
        )

    async def show(request: Request, tenant: str) -> Response:
        record = await store.inspect(tenant, _conversation_id(request))
        if record is None:
            return error_response(NotFound("no such conversation", code="not_found"))
        return AdminJSON({"tenant": tenant, **describe_record(record)})

    async def show_ledger(request: Request, tenant: str) -> Response:
        cid = _conversation_id(request)
        ledger = ledger_view(await store.ledgers.inspect(tenant, cid))
        if ledger is None:
            return error_response(NotFound("no ledger for this conversation", code="not_found"))
        return AdminJSON({"conversation_id": cid, "ledger": ledger})

    async def show_timeline(request: Request, tenant: str) -> Response:
        cid = _conversation_id(request)
        turns = books.turns_of(await store.ledgers.inspect(tenant, cid))
        return AdminJSON(
            {
                "conversation_id": cid,
                "turns": [turn.view() for turn in turns],
                "max_turns": books.MAX_TURNS,
            }
        )

    async def show_originals(request: Request, tenant: str) -> Response:
        cid = _conversation_id(request)
        kept = await store.originals.inspect(tenant, cid)
        if not kept:
            return error_response(NotFound("nothing kept for this conversation", code="not_found"))
        data = [{"handle": handle, "content": text} for handle, text in kept]
        return AdminJSON({"conversation_id": cid, "data": data})

    async def show_checkpoint(request: Request, tenant: str) -> Response:
        record = await store.inspect(tenant, _conversation_id(request))
        checkpoint = record.get(request.path_params["checkpoint_id"]) if record else None
        if checkpoint is None:
            return error_response(NotFound("no such checkpoint", code="not_found"))
        return AdminJSON(describe_checkpoint(checkpoint))

    async def forget(request: Request, tenant: str) -> Response:
        deleted = await compaction.forget(tenant, _conversation_id(request))
        return AdminJSON({"deleted": deleted})

    async def edit_summary(request: Request, tenant: str, *, patch: bool) -> Response:
        cid = _conversation_id(request)
        text, target_id = inputs.new_summary(
            await request.body(), request.headers.get("content-type", ""), patch=patch
        )
        made = await corrections.correct(tenant, cid, text, target_id)
        return AdminJSON({"checkpoint": describe_checkpoint(made), "corrects": made.parent_id})

    async def put_summary(request: Request, tenant: str) -> Response:
        return await edit_summary(request, tenant, patch=False)

    async def patch_summary(request: Request, tenant: str) -> Response:
        return await edit_summary(request, tenant, patch=True)

    async def restore(request: Request, tenant: str) -> Response:
        checkpoint_id = request.path_params["checkpoint_id"]
        record = await corrections.restore(tenant, _conversation_id(request), checkpoint_id)
        return AdminJSON({"current": checkpoint_id, "retired": sorted(record.retired)})

    async def compact(request: Request, tenant: str) -> Response:
        body = await inputs.conversation_body(request)
        plan, checkpoint = await compaction.compact_now(
            tenant,
            _conversation_id(request),
            body,
            policy_name=body.get("policy"),
            credentials=caller_credentials(request),
        )
        return AdminJSON(
            {
                "checkpoint": None if checkpoint is None else describe_checkpoint(checkpoint),
                "plan": describe_plan(plan, include_messages=False),
            }
        )

    async def preview(request: Request, tenant: str) -> Response:
        body = await inputs.conversation_body(request)
        plan = compaction.preview(body, policy_name=body.get("policy"), tenant=tenant)
        return AdminJSON(describe_plan(plan))

    conversation = "/conversations/{conversation_id:path}"
    return [
        Route("/conversations", endpoint(listing), methods=["GET"]),
        Route(
            f"{conversation}/checkpoints/{{checkpoint_id}}/restore",
            endpoint(restore),
            methods=["POST"],
        ),
        Route(f"{conversation}/summary", endpoint(put_summary), methods=["PUT"]),
        Route(f"{conversation}/summary", endpoint(patch_summary), methods=["PATCH"]),
        Route(
            f"{conversation}/checkpoints/{{checkpoint_id}}",
            endpoint(show_checkpoint),
            methods=["GET"],
        ),
        Route(f"{conversation}/compact", endpoint(compact), methods=["POST"]),
        Route(f"{conversation}/ledger", endpoint(show_ledger), methods=["GET"]),
        Route(f"{conversation}/timeline", endpoint(show_timeline), methods=["GET"]),
        Route(f"{conversation}/originals", endpoint(show_originals), methods=["GET"]),
        Route(conversation, endpoint(show), methods=["GET"]),
        Route(conversation, endpoint(forget), methods=["DELETE"]),
        Route("/preview", endpoint(preview), methods=["POST"]),
    ]
