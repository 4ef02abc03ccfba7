"""Keep: how much recent context stays verbatim, as the cut point where the verbatim part starts.

- ``interactions: N``: the last N interactions, whole. ``interactions: 0`` keeps nothing older
  than the current task: the cut is the deepest safe one (``Grouping.last_cut``), so only the
  latest user message and the newest tool round stay verbatim.
- ``messages: N``: walking backwards over cut points (interaction starts and tool-round
  boundaries), the fewest messages holding at least N (never fewer than asked).
- ``tokens: N``: walking backwards over cut points while the kept part fits in N tokens.
- ``fraction: F``: like ``tokens`` with F x the model's context window; when the window is
  unknown, the last 2 interactions (the default keep).
- ``chat_interactions: N``, beside one of the above: a conversation with no tool round yet (a
  chat) keeps its last N interactions instead.

A cut inside an interaction sends its user message again (``Grouping.task_before``), and pinned
messages before the cut are sent anyway (``proxy.core.pins``), so they count towards what is kept. Whatever the mode, the newest round (or the latest user
message, when its interaction has no complete round yet) is always kept, and the result is a
safe cut point: never between a tool call and its result.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from proxy.core.interactions import Grouping
from proxy.core.policy import KeepSettings

FALLBACK_INTERACTIONS = 2


def first_kept(
    grouping: Grouping,
    counts: Sequence[int],
    keep: KeepSettings,
    *,
    context_window: int | None,
    floor: int = 0,
) -> int:
    """Message index where the verbatim part starts: a safe cut point, never below ``floor`` (a
    cut already covered by a summary) and never past ``grouping.last_cut()``."""
    n = len(grouping)
    if n == 0:
        return grouping.preamble_len
    deepest = grouping.last_cut()
    keep = keep_for(grouping, keep)
    budget = keep.tokens or (
        int(keep.fraction * context_window) if context_window and keep.fraction else 0
    )
    if keep.interactions == 0:
        cut = deepest
    elif keep.interactions or (keep.fraction and not context_window):
        k = n - (keep.interactions or FALLBACK_INTERACTIONS)
        cut = grouping.start_of(grouping.safe_at_or_before(min(max(k, 0), n - 1)))
    elif keep.messages:
        cut = _walk_back(grouping, counts, deepest, messages=keep.messages)
    else:
        cut = _walk_back(grouping, counts, deepest, tokens=budget)
    return max(min(cut, deepest), floor)


def keep_for(grouping: Grouping, keep: KeepSettings) -> KeepSettings:
    """The keep that applies to this conversation: ``chat_interactions`` when it has no tool
    round (a chat) and sets it, else ``keep`` itself."""
    if keep.chat_interactions is not None and not grouping.round_ends:
        return KeepSettings(interactions=keep.chat_interactions)
    return keep


def _walk_back(
    grouping: Grouping, counts: Sequence[int], deepest: int, *, messages: int = 0, tokens: int = 0
) -> int:
    """From ``deepest`` back over cut points: while fewer than ``messages`` are kept, or while
    the earlier cut still keeps at most ``tokens``."""
    cuts = grouping.cuts
    i = bisect_left(cuts, deepest)
    if i == len(cuts) or cuts[i] != deepest:
        return deepest
    kept = grouping.kept_tokens(counts, deepest)  # grown as the cut moves back
    pins = set(grouping.pinned)  # sent whatever the cut: already counted
    while i > 0:
        earlier = cuts[i - 1]
        if messages:
            if grouping.kept_messages(cuts[i]) >= messages:
                break
        else:
            wider = kept + sum(counts[j] for j in range(earlier, cuts[i]) if j not in pins)
            wider += grouping.task_tokens(counts, earlier, pins)
            wider -= grouping.task_tokens(counts, cuts[i], pins)
            if wider > tokens:
                break
            kept = wider
        i -= 1
    return cuts[i]
