"""Who may use the admin API, and which tenant a request is about.

Every admin call carries ``admin.token`` as a bearer token. Reading a conversation needs its
tenant, and the tenant is derived from the caller's credential: the admin sends it in
``X-Caller-Authorization`` (as the caller would send Authorization). Only with
``admin.cross_tenant: true`` may ``X-Tenant`` name a tenant directly, so an admin token alone
cannot read other tenants' content unless the config says so.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from proxy.config.ops import AdminSettings
from proxy.config.store import ConversationSettings
from proxy.errors import InvalidRequest, Unauthorized
from proxy.state.tenancy import Credentials, Tenancy, credential_from_headers

CALLER_HEADER = "x-caller-authorization"
TENANT_HEADER = "x-tenant"


class AdminAuth:
    """Checks the admin token and names the tenant of each admin request."""

    def __init__(
        self, settings: AdminSettings, *, tenancy: Tenancy, conversation: ConversationSettings
    ) -> None:
        assert settings.token is not None, "the admin API is only mounted with a token"
        self._token = settings.token.get_secret_value().encode()
        self._cross_tenant = settings.cross_tenant
        self._tenancy = tenancy
        self._conversation = conversation

    def tenant(self, request: Request) -> str:
        """Check the admin token; return the tenant the request is about."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self._token
        ):
            raise Unauthorized("a valid admin token is required", code="invalid_admin_token")
        if self._cross_tenant and TENANT_HEADER in request.headers:
            return request.headers[TENANT_HEADER]
        caller = request.headers.get(CALLER_HEADER)
        if caller is None and self._conversation.credential_header is None:
            raise InvalidRequest(
                f"send the caller's credential in {CALLER_HEADER} to name the tenant",
                param=CALLER_HEADER,
                code="missing_tenant",
            )
        headers = dict(request.headers)
        if caller is not None:
            headers["authorization"] = caller
        return self._tenancy.tenant(credential_from_headers(headers, self._conversation))


def caller_credentials(request: Request) -> Credentials | None:
    """The caller's credential as the caller would send it (for a summary on their key)."""
    caller = request.headers.get(CALLER_HEADER)
    return None if caller is None else {"authorization": caller}
