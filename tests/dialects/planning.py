"""The core's plan of a dialect's body, as the request path makes it (no stored state): what the
adapters' property tests render back."""

from __future__ import annotations

from typing import Any

from proxy.core.planner import Plan, plan
from proxy.core.policy import PolicySettings
from proxy.core.tokens import TokenCounter
from proxy.dialects.base import Dialect


def plan_body(
    dialect: Dialect,
    body: dict[str, Any],
    policy: PolicySettings,
    counter: TokenCounter,
    *,
    model: str = "gpt-4o",
) -> tuple[list[dict[str, Any]], Plan]:
    """(the neutral messages of ``body``, the plan the core makes of them)."""
    neutral = dialect.conversation(body)
    assert neutral is not None, "a body the dialect compacts"
    made = plan(
        neutral.messages,
        policy,
        model=model,
        counter=counter,
        model_info=None,
        prior=None,
        tools=neutral.tools,
    )
    return neutral.messages, made
