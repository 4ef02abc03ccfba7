"""What a planned request becomes on the wire: the body the provider receives and the
``X-Compaction`` headers the client's answer carries, and the event that tells of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy import wirejson
from proxy.compaction import protocol
from proxy.compaction.conversation import Conversation
from proxy.compaction.events import CompactionDecided
from proxy.core.plan import Plan
from proxy.types import RawHeaders

OFF = CompactionDecided("off", "off")


def decided(conv: Conversation, current: Plan, outcome: str) -> CompactionDecided:
    return CompactionDecided(
        conv.policy.strategy,
        outcome,
        current.tokens_before,
        current.tokens_after,
        protocol.applied_parts(current),
        current.headroom_short is not None,
    )


def with_cache_key(conv: Conversation, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the conversation's prompt cache key when its API has the field, the policy
    sets it and the client sent none (the client's own value, even null, is never replaced).

    Only a body the proxy rewrites carries it: one it leaves alone goes out as the client's
    bytes. A compacted conversation stays compacted (an applied summary stays active, a stub
    stays), so from its first rewritten request on, every request of it carries the same key
    and is routed to the same cache."""
    field = conv.dialect.cache_key_field if conv.dialect is not None else None
    if field is None or not conv.cache_key or field in body:
        return body
    return {**body, field: conv.cache_key}


def render(
    conv: Conversation,
    current: Plan,
    original: list[dict[str, Any]],
    outcome: str,
    *,
    retried: bool = False,
    offer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[bytes, RawHeaders]:
    """(the body to send, the headers to add to the answer). ``original``: the messages as the
    dialect read them: when the plan sends exactly those, the client's own bytes go out.
    ``offer``: adds the recall tool to a rewritten body. Blocking: encoding is CPU work."""
    if current.messages is original or conv.dialect is None:
        body = conv.raw  # nothing changed: the client's bytes go out
    else:
        # Deterministic encoding, so the same plan is the same bytes (provider prompt caches).
        rendered = with_cache_key(conv, conv.dialect.render(conv.body, current))
        body = wirejson.encode(offer(rendered) if offer is not None else rendered)
    headers = protocol.response_headers(outcome, current, policy=conv.policy_name, retried=retried)
    return body, headers
