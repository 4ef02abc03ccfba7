"""The admin API's compaction: a dry run of a policy on posted messages, and a forced summary.

Admin code built on the ``Compactor``'s public primitives (``conversation_of``,
``deepest_checkpoint``, ``plan``, ``summarize``), not an entry point of the request path
(docs/architecture.md). The posted body is read in the dialect the app names (chat completions).
"""

from __future__ import annotations

from typing import Any

from proxy.compaction.compactor import Compactor
from proxy.compaction.policies import choose_policy
from proxy.core.checkpoints import Checkpoint
from proxy.core.plan import Plan
from proxy.core.policy import PolicySettings
from proxy.dialects.base import Dialect
from proxy.errors import InvalidRequest
from proxy.state.tenancy import Credentials


class AdminCompaction:
    """Previews and forced compactions of posted conversations, for the admin routes."""

    def __init__(self, compactor: Compactor, *, dialect: Dialect) -> None:
        self._compactor = compactor
        self._dialect = dialect

    def policy(
        self, body: dict[str, Any], policy_name: object, tenant: str
    ) -> tuple[str, PolicySettings]:
        """The policy a posted body names in ``policy``, else the one its model and tenant
        route to."""
        settings = self._compactor.settings
        if policy_name is None:
            return choose_policy(settings, {}, model=body.get("model") or "", tenant=tenant)
        if not isinstance(policy_name, str) or policy_name not in settings.policies:
            raise InvalidRequest(
                f"no configured policy named {policy_name!r}", param="policy", code="unknown_policy"
            )
        return policy_name, settings.policies[policy_name]

    def preview(self, body: dict[str, Any], *, policy_name: object, tenant: str) -> Plan:
        """A dry run: what the policy would send for these messages, with no stored state."""
        name, policy = self.policy(body, policy_name, tenant)
        conv = self._compactor.conversation_of(
            tenant,
            "preview",
            body,
            policy_name=name,
            policy=policy,
            credentials=None,
            dialect=self._dialect,
        )
        return self._compactor.plan(conv, None)

    async def forget(self, tenant: str, conversation_id: str) -> bool:
        """Delete the conversation (its unapplied summaries counted as unused)."""
        return await self._compactor.forget(tenant, conversation_id)

    async def compact_now(
        self,
        tenant: str,
        conversation_id: str,
        body: dict[str, Any],
        *,
        policy_name: object,
        credentials: Credentials | None,
    ) -> tuple[Plan, Checkpoint | None]:
        """Force a summary of everything but the last interaction, now, and store it."""
        compactor = self._compactor
        name, policy = self.policy(body, policy_name, tenant)
        conv = compactor.conversation_of(
            tenant,
            conversation_id,
            body,
            policy_name=name,
            policy=policy,
            credentials=credentials,
            dialect=self._dialect,
        )
        checkpoint = await compactor.deepest_checkpoint(conv)
        forced = compactor.plan(conv, checkpoint, force=True)
        wanted = forced.summary_request
        if policy.strategy != "summarize" or wanted is None:
            return forced, checkpoint
        made = await compactor.summarize(conv, forced, wanted, mode="admin")
        return compactor.plan(conv, made, force=True), made
