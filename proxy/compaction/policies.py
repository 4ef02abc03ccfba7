"""Which policy a request gets: X-Compaction-Policy, then routes, then ``default``; and which
request gets none, by its headers alone (``untouched``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

from proxy.compaction import protocol
from proxy.config.settings import ConversationSettings, Route
from proxy.core.policy import PolicySettings
from proxy.errors import InvalidRequest
from proxy.state.tenancy import conversation_header
from proxy.types import HeaderView


class PolicyTable(Protocol):
    """The configured policies and the routes to them (``Settings`` has both, and so has
    ``proxy.compaction.settings.CompactionSettings``)."""

    @property
    def policies(self) -> Mapping[str, PolicySettings]: ...

    @property
    def routes(self) -> Sequence[Route]: ...


class RequestRules(PolicyTable, Protocol):
    """A policy table and how a conversation is named (``CompactionSettings``)."""

    @property
    def conversation(self) -> ConversationSettings: ...


@dataclass(frozen=True)
class Untouched:
    """A request compaction leaves as it came, decided by its headers alone; ``policy``: the
    policy it asked for, when that policy is off."""

    policy: str | None = None


def untouched(rules: RequestRules, headers: HeaderView) -> Untouched | None:
    """Whether the headers alone send this request through unread: ``X-Compaction: off``, no
    conversation id under ``missing: passthrough``, or a policy asked for that is off."""
    if protocol.switched_off(headers):
        return Untouched()
    conversation = rules.conversation
    if conversation.missing == "passthrough" and conversation_header(headers, conversation) is None:
        return Untouched()
    named = protocol.asked_policy(headers)
    if named is not None and named in rules.policies and rules.policies[named].strategy == "off":
        return Untouched(named)
    return None


def _matches(
    route: Route, headers: Mapping[str, str] | HeaderView, model: str, tenant: str
) -> bool:
    match = route.match
    if match.model is not None and not fnmatchcase(model, match.model):
        return False
    if match.tenant is not None and match.tenant != tenant:
        return False
    return all(headers.get(name.lower()) == value for name, value in match.header.items())


def choose_policy(
    table: PolicyTable, headers: Mapping[str, str] | HeaderView, *, model: str, tenant: str
) -> tuple[str, PolicySettings]:
    """(name, policy) for a request; ``headers``: a request's view, or lowercase names.

    An X-Compaction-Policy naming no configured policy is a 400, so a typo never silently falls
    back to another policy.
    """
    asked = headers.get(protocol.POLICY)
    if asked is not None:
        if asked not in table.policies:
            raise InvalidRequest(
                f"{protocol.POLICY_PARAM} names no configured policy: {asked!r}",
                param=protocol.POLICY_PARAM,
                code="unknown_policy",
            )
        return asked, table.policies[asked]
    for route in table.routes:
        if _matches(route, headers, model, tenant):
            return route.policy, table.policies[route.policy]
    return "default", table.policies["default"]
