"""Which policy a chat completion gets: X-Compaction-Policy, then routes, then ``default``."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

from proxy.config.settings import Route, Settings
from proxy.core.policy import PolicySettings
from proxy.errors import InvalidRequest

POLICY_HEADER = "x-compaction-policy"
SWITCH_HEADER = "x-compaction"


def _matches(route: Route, headers: Mapping[str, str], model: str, tenant: str) -> bool:
    match = route.match
    if match.model is not None and not fnmatchcase(model, match.model):
        return False
    if match.tenant is not None and match.tenant != tenant:
        return False
    return all(headers.get(name.lower()) == value for name, value in match.header.items())


def choose_policy(
    settings: Settings, headers: Mapping[str, str], *, model: str, tenant: str
) -> tuple[str, PolicySettings]:
    """(name, policy) for a request; ``headers`` have lowercase names.

    An X-Compaction-Policy naming no configured policy is a 400, so a typo never silently falls
    back to another policy.
    """
    asked = headers.get(POLICY_HEADER)
    if asked is not None:
        if asked not in settings.policies:
            raise InvalidRequest(
                f"X-Compaction-Policy names no configured policy: {asked!r}",
                param="X-Compaction-Policy",
                code="unknown_policy",
            )
        return asked, settings.policies[asked]
    for route in settings.routes:
        if _matches(route, headers, model, tenant):
            return route.policy, settings.policies[route.policy]
    return "default", settings.policies["default"]
