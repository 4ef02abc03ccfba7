"""``clear_tool_results``: old tool results replaced by a short stub before anything is decided
(observation masking). The stub keeps the ``tool_call_id``, so call and result stay a pair."""

from __future__ import annotations

from proxy.core.interactions import Grouping
from proxy.core.policy import PolicySettings
from proxy.core.tokens import TokenCounter
from proxy.types import ChatMessage

CLEARED_STUB = "[tool result cleared to save context: {tokens} tokens]"


def clear_tool_results(
    source: list[ChatMessage],
    counts: list[int],
    grouping: Grouping,
    policy: PolicySettings,
    counter: TokenCounter,
    model: str,
    *,
    start: int = 0,
    end: int | None = None,
) -> tuple[list[ChatMessage], list[int], tuple[int, ...]]:
    """Stub results older than N interactions, or than N tool rounds (observation masking inside
    one long task): a result is old when N complete rounds came after its own. A result is
    stubbed only when the stub is smaller; when none is, ``source`` and ``counts`` come back
    as they are (the same objects), so the plan knows nothing changed. ``start``: where the
    prompt's verbatim part begins (the end of the summary in use): the results before it are
    not sent, so they are neither stubbed nor counted towards a batch. ``end``: no result from
    this index on is stubbed (a new batch held back: the batches before it close as they did)."""
    settings = policy.clear_tool_results
    older = settings.older_than_interactions
    by_interaction = grouping.start_of(len(grouping) - older) if 0 < older < len(grouping) else 0
    rounds = settings.older_than_rounds
    ends = grouping.round_ends
    by_round = ends[len(ends) - rounds - 1] if 0 < rounds < len(ends) else 0
    # Results before this index are old by one measure or the other.
    limit = max(by_interaction, by_round)
    if not limit:
        return source, counts, ()
    stubs: list[tuple[int, ChatMessage, int]] = []  # (index, stub, its tokens), oldest first
    pins = set(grouping.pinned)  # a pinned result is never stubbed (proxy.core.pins)
    for i in range(max(grouping.preamble_len, start), limit):
        message = source[i]
        if i in pins:
            continue
        if message.get("role") in ("tool", "function") and counts[i] > settings.min_tokens:
            stub: ChatMessage = {**message, "content": CLEARED_STUB.format(tokens=counts[i])}
            stub_tokens = counter.count_message(stub, model)
            if stub_tokens >= counts[i]:
                continue  # a stub no smaller than the result would change bytes, saving nothing
            stubs.append((i, stub, stub_tokens))
    stubs = _whole_batches(stubs, counts, settings.clear_at_least)
    if end is not None:
        stubs = [stub for stub in stubs if stub[0] < end]
    working = list(source)
    cleared_counts = list(counts)
    cleared = []
    for i, stub, stub_tokens in stubs:
        working[i] = stub
        cleared_counts[i] = stub_tokens
        cleared.append(i)
    if not cleared:
        # Nothing stubbed: the very list that came in, so the plan is unchanged and the client's
        # bytes go out (a copy here reported every such request as "applied").
        return source, counts, ()
    return working, cleared_counts, tuple(cleared)


def _whole_batches(
    stubs: list[tuple[int, ChatMessage, int]], counts: list[int], at_least: int
) -> list[tuple[int, ChatMessage, int]]:
    """The stubs of the complete batches: walking from the oldest, a batch closes once its stubs
    save ``at_least`` tokens; the newest batch, still short of that, waits. The walk depends only
    on the history's prefix, so a batch cleared once is cleared the same way in every later
    request (its stubs' bytes never change) and the prompt's prefix moves once per batch."""
    if at_least <= 0:
        return stubs
    closed = 0
    saved = 0
    for n, (i, _, stub_tokens) in enumerate(stubs, start=1):
        saved += counts[i] - stub_tokens
        if saved >= at_least:
            closed, saved = n, 0
    return stubs[:closed]
