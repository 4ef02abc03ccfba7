"""The admin API under /admin, behind ``admin.token`` (absent when unset).

Reading a conversation needs its tenant, and the tenant is derived from the caller's credential:
the admin sends it in ``X-Caller-Authorization`` (as the caller would send Authorization). Only
with ``admin.cross_tenant: true`` may ``X-Tenant`` name a tenant directly, so an admin token alone
cannot read other tenants' content unless the config says so.

A conversation id may hold ``/``; in an admin path it is sent percent-encoded (``%2F``), and the
routes match the path as sent (``EncodedIds``), so ``x%2Fcheckpoints%2Fzz`` names that
conversation rather than checkpoint ``zz`` of ``x``.

The preview (a dry run) and the forced compaction are admin code built on the ``Compactor``'s
public primitives, not entry points of the request path (docs/architecture.md).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy import wirejson
from proxy.compaction.policies import choose_policy
from proxy.config.settings import Settings
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan_view import describe_checkpoint, describe_plan, describe_record
from proxy.core.planner import Plan
from proxy.core.policy import PolicySettings
from proxy.errors import InvalidRequest, NotFound, ProxyError, StoreError, Unauthorized
from proxy.ops.admin.operations import AdminJSON, state_routes
from proxy.state.conversations import Store
from proxy.state.tenancy import (
    Credentials,
    Tenancy,
    credential_from_headers,
    validate_conversation_id,
)

if TYPE_CHECKING:
    from proxy.compaction.compactor import Compactor

CALLER_HEADER = "x-caller-authorization"
TENANT_HEADER = "x-tenant"


class EncodedIds:
    """Routes the admin API on the path as the client sent it, escapes undecoded.

    uvicorn decodes ``%2F`` into ``scope["path"]``, where it is one more separator: an id with
    ``/`` sent encoded would be split like an unencoded one, and ``x/checkpoints/zz`` could never be
    read (issue 17). Matched on the raw path, an escape stays inside its path parameter, which the
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


def _error(error: ProxyError) -> Response:
    return Response(error.to_body(), status_code=error.status_code, media_type="application/json")


def _caller_credentials(request: Request) -> dict[str, str] | None:
    """The caller's credential as the caller would send it (for a summary on their key)."""
    caller = request.headers.get(CALLER_HEADER)
    return None if caller is None else {"authorization": caller}


def admin_policy(
    settings: Settings, body: dict[str, Any], policy_name: object, tenant: str
) -> tuple[str, PolicySettings]:
    """The policy a posted body names in ``policy``, else the one its model and tenant route to."""
    if policy_name is None:
        return choose_policy(settings, {}, model=body.get("model") or "", tenant=tenant)
    if not isinstance(policy_name, str) or policy_name not in settings.policies:
        raise InvalidRequest(
            f"no configured policy named {policy_name!r}", param="policy", code="unknown_policy"
        )
    return policy_name, settings.policies[policy_name]


def preview_plan(
    compactor: Compactor, body: dict[str, Any], *, policy_name: object, tenant: str
) -> Plan:
    """A dry run: what the policy would send for these messages, with no stored state."""
    name, policy = admin_policy(compactor.settings, body, policy_name, tenant)
    conv = compactor.conversation_of(
        tenant, "preview", body, policy_name=name, policy=policy, credentials=None
    )
    return compactor.plan(conv, None)


async def compact_now(
    compactor: Compactor,
    tenant: str,
    conversation_id: str,
    body: dict[str, Any],
    *,
    policy_name: object,
    credentials: Credentials | None,
) -> tuple[Plan, Checkpoint | None]:
    """Force a summary of everything but the last interaction, now, and store it."""
    name, policy = admin_policy(compactor.settings, body, policy_name, tenant)
    conv = compactor.conversation_of(
        tenant, conversation_id, body, policy_name=name, policy=policy, credentials=credentials
    )
    checkpoint = await compactor.deepest_checkpoint(conv)
    forced = compactor.plan(conv, checkpoint, force=True)
    wanted = forced.summary_request
    if policy.strategy != "summarize" or wanted is None:
        return forced, checkpoint
    made = await compactor.summarize(conv, forced, wanted, mode="admin")
    return compactor.plan(conv, made, force=True), made


def admin_app(
    settings: Settings, store: Store, compactor: Compactor, *, tenancy: Tenancy
) -> ASGIApp:
    """The admin API to mount at /admin: its routes matched on the raw path."""
    return EncodedIds(Router(admin_routes(settings, store, compactor, tenancy=tenancy)))


def admin_routes(
    settings: Settings, store: Store, compactor: Compactor, *, tenancy: Tenancy
) -> list[BaseRoute]:
    token = settings.admin.token

    def authorize(request: Request) -> str:
        """Check the admin token; return the tenant the request is about."""
        assert token is not None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise Unauthorized("a valid admin token is required", code="invalid_admin_token")
        if settings.admin.cross_tenant and TENANT_HEADER in request.headers:
            return request.headers[TENANT_HEADER]
        caller = request.headers.get(CALLER_HEADER)
        if caller is None and settings.conversation.credential_header is None:
            raise InvalidRequest(
                f"send the caller's credential in {CALLER_HEADER} to name the tenant",
                param=CALLER_HEADER,
                code="missing_tenant",
            )
        headers = dict(request.headers)
        if caller is not None:
            headers["authorization"] = caller
        return tenancy.tenant(credential_from_headers(headers, settings.conversation))

    async def body_of(request: Request) -> dict[str, Any]:
        body = wirejson.parse(await request.body())
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise InvalidRequest(
                "the body must be an object with a 'messages' array", param="messages"
            )
        return body

    def endpoint(handler):  # one place for auth and the error shape
        async def run(request: Request) -> Response:
            try:
                tenant = authorize(request)
                return await handler(request, tenant)
            except StoreError as exc:
                return _error(
                    ProxyError(f"the store cannot answer: {exc.message}", code="store_unavailable")
                )
            except ProxyError as exc:
                return _error(exc)

        return run

    def conversation_id(request: Request) -> str:
        # Matched on the raw path (EncodedIds): decoded here. Checkpoint ids are hex, never escaped.
        return validate_conversation_id(unquote(request.path_params["conversation_id"]))

    async def show(request: Request, tenant: str) -> Response:
        record = await store.inspect(tenant, conversation_id(request))
        if record is None:
            return _error(NotFound("no such conversation", code="not_found"))
        return AdminJSON({"tenant": tenant, **describe_record(record)})

    async def show_checkpoint(request: Request, tenant: str) -> Response:
        record = await store.inspect(tenant, conversation_id(request))
        checkpoint = record.get(request.path_params["checkpoint_id"]) if record else None
        if checkpoint is None:
            return _error(NotFound("no such checkpoint", code="not_found"))
        return AdminJSON(describe_checkpoint(checkpoint))

    async def forget(request: Request, tenant: str) -> Response:
        deleted = await store.delete(tenant, conversation_id(request))
        return AdminJSON({"deleted": deleted})

    async def compact(request: Request, tenant: str) -> Response:
        body = await body_of(request)
        plan, checkpoint = await compact_now(
            compactor,
            tenant,
            conversation_id(request),
            body,
            policy_name=body.get("policy"),
            credentials=_caller_credentials(request),
        )
        return AdminJSON(
            {
                "checkpoint": None if checkpoint is None else describe_checkpoint(checkpoint),
                "plan": describe_plan(plan, include_messages=False),
            }
        )

    async def preview(request: Request, tenant: str) -> Response:
        body = await body_of(request)
        plan = preview_plan(compactor, body, policy_name=body.get("policy"), tenant=tenant)
        return AdminJSON(describe_plan(plan))

    if token is None:
        return []
    return [
        *state_routes(settings, store, compactor.counter, endpoint, conversation_id),
        Route(
            "/conversations/{conversation_id:path}/checkpoints/{checkpoint_id}",
            endpoint(show_checkpoint),
            methods=["GET"],
        ),
        Route("/conversations/{conversation_id:path}/compact", endpoint(compact), methods=["POST"]),
        Route("/conversations/{conversation_id:path}", endpoint(show), methods=["GET"]),
        Route("/conversations/{conversation_id:path}", endpoint(forget), methods=["DELETE"]),
        Route("/preview", endpoint(preview), methods=["POST"]),
    ]
