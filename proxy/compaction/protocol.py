"""The ``X-Compaction-*`` headers: every name the proxy reads from a client or adds to its answer,
and how their values are written (docs/operations.md). Nothing else spells these names.

Request headers (the client's): ``X-Compaction: off`` skips compaction for one request,
``X-Compaction-Policy`` names a policy, ``X-Compaction-Checkpoint`` pins a checkpoint
(``proxy.compaction.pinning``). None of them reaches the provider.

Response headers (ours): ``X-Compaction`` says what happened (``applied``, ``skipped``,
``pending``, ``blocked``, ``failed``, ``off``), with the tokens before and after, the checkpoint
applied and the policy; ``X-Compaction-Retried`` when an overflow was retried compacted harder;
under ``strategy: native``, ``X-Compaction-Strategy`` (what ran) and ``X-Compaction-Native``
(what the provider did).
"""

from __future__ import annotations

from proxy.core.planner import Plan
from proxy.types import HeaderView, RawHeaders

PREFIX = "x-compaction"  # every header of ours starts so: never forwarded upstream
SWITCH = "x-compaction"  # request: "off"; response: the outcome
POLICY = "x-compaction-policy"  # request: the policy asked for; response: the one applied
CHECKPOINT = "x-compaction-checkpoint"  # request: a pin; response: the checkpoint applied
TOKENS_BEFORE = "x-compaction-tokens-before"
TOKENS_AFTER = "x-compaction-tokens-after"
RETRIED = "x-compaction-retried"
STRATEGY = "x-compaction-strategy"  # response: the strategy that ran (native, or its fallback)
NATIVE = "x-compaction-native"  # response: what the provider's own compaction did

# As errors name them (the case the docs write).
POLICY_PARAM = "X-Compaction-Policy"
CHECKPOINT_PARAM = "X-Compaction-Checkpoint"

# The summary webhook's own headers (proxy/ops/export/webhook.py): a delivery, not a request.
WEBHOOK_SIGNATURE = "X-Compaction-Signature"
WEBHOOK_DELIVERY = "X-Compaction-Delivery"
WEBHOOK_EVENT = "X-Compaction-Event"

_SWITCH = SWITCH.encode()
_POLICY = POLICY.encode()
_CHECKPOINT = CHECKPOINT.encode()
_TOKENS_BEFORE = TOKENS_BEFORE.encode()
_TOKENS_AFTER = TOKENS_AFTER.encode()
_RETRIED = (RETRIED.encode(), b"context_length_exceeded")
STRATEGY_BYTES = STRATEGY.encode()
NATIVE_BYTES = NATIVE.encode()


def switched_off(headers: HeaderView) -> bool:
    """The client sent ``X-Compaction: off``."""
    return (headers.get(SWITCH) or "").strip().lower() == "off"


def asked_policy(headers: HeaderView) -> str | None:
    """The policy ``X-Compaction-Policy`` names, or None."""
    return headers.get(POLICY)


def pinned_checkpoint(headers: HeaderView) -> str | None:
    """The checkpoint id a request pins, or None (absent or empty)."""
    return (headers.get(CHECKPOINT) or "").strip() or None


def response_headers(
    outcome: str, plan: Plan | None = None, *, policy: str | None = None, retried: bool = False
) -> RawHeaders:
    """What the client's answer carries about compaction."""
    headers = [(_SWITCH, outcome.encode())]
    if plan is not None:
        headers += [
            (_TOKENS_BEFORE, str(plan.tokens_before).encode()),
            (_TOKENS_AFTER, str(plan.tokens_after).encode()),
            (_CHECKPOINT, (plan.applied_checkpoint or "").encode()),
        ]
    if policy is not None:
        headers.append((_POLICY, policy.encode()))
    if retried:
        headers.append(_RETRIED)
    return headers
