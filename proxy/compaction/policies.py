"""Which policy a request gets: X-Compaction-Policy, then routes, then ``default``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Protocol

from proxy.compaction import protocol
from proxy.config.settings import Route
from proxy.core.policy import PolicySettings
from proxy.errors import InvalidRequest
from proxy.types import HeaderView


class PolicyTable(Protocol):
    """The configured policies and the routes to them (``Settings`` has both, and so has
    ``proxy.compaction.settings.CompactionSettings``)."""

    @property
    def policies(self) -> Mapping[str, PolicySettings]: ...

    @property
    def routes(self) -> Sequence[Route]: ...


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
