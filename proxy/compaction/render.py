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
from proxy.types import ChatMessage, RawHeaders

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

    Every request of a conversation the proxy plans carries it, from the first (a body the plan
    leaves as it is gets it by ``raw_with_cache_key``), so all of them are routed to the same
    cache. A request the proxy leaves alone (``X-Compaction: off``, no conversation, a policy
    that is off) goes out as the client's bytes."""
    field = conv.dialect.cache_key_field if conv.dialect is not None else None
    if field is None or not conv.cache_key or field in body:
        return body
    return {**body, field: conv.cache_key}


def raw_with_cache_key(conv: Conversation) -> bytes:
    """The client's bytes with the conversation's prompt cache key, under the rule of
    ``with_cache_key``. The key goes in as the object's first member, the rest of the bytes as
    they came: no re-encoding of a body the plan leaves as it is. Its requests then reach the
    provider under the same key from the conversation's first request on: a key that appeared
    only once the proxy compacts would route that request away from the warm cache."""
    field = conv.dialect.cache_key_field if conv.dialect is not None else None
    raw = conv.raw
    if field is None or not conv.cache_key or not conv.body or field in conv.body:
        return raw
    # The body parsed as a non-empty JSON object: its first brace opens it.
    start = raw.find(b"{") + 1
    member = wirejson.encode({field: conv.cache_key})[1:-1]
    # One copy of the body (a view of the rest, not a slice): 0.07 ms for a 1 MB body.
    return b"".join((raw[:start], member, b",", memoryview(raw)[start:]))


def render(
    conv: Conversation,
    current: Plan,
    original: list[ChatMessage],
    outcome: str,
    *,
    retried: bool = False,
    offer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[bytes, RawHeaders]:
    """(the body to send, the headers to add to the answer). ``original``: the messages as the
    dialect read them: when the plan sends exactly those, the client's own bytes go out.
    ``offer``: adds the recall tool to a rewritten body. Blocking: encoding is CPU work."""
    if current.messages is original or conv.dialect is None:
        body = raw_with_cache_key(conv)  # nothing changed: the client's bytes (and the key)
    else:
        # Deterministic encoding, so the same plan is the same bytes (provider prompt caches).
        rendered = with_cache_key(conv, conv.dialect.render(conv.body, current))
        body = wirejson.encode(offer(rendered) if offer is not None else rendered)
    headers = protocol.response_headers(outcome, current, policy=conv.policy_name, retried=retried)
    return body, headers
