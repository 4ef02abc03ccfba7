"""Grouping a message list into a preamble and interactions, and where it may be cut.

docs/policies.md ("Interactions"): the preamble is the leading run of system/developer messages; an
interaction is one user message plus every message after it up to the next user message;
messages before the first user message that are not system form interaction 0. A system
message in the middle of the conversation belongs to the interaction it sits in, so the
preamble stays a contiguous prefix and "messages[:covered]" means the same thing everywhere.

Cut points ("Agent runs compact too"): every interaction start, and every *round
boundary* inside an interaction: the index right after the last result of a tool round (an
assistant message with tool calls, or a legacy ``function_call``, plus its answers). A cut
point is kept only where no call is separated from its answer: a malformed history (a result
arriving after the next user message) makes that boundary unsafe instead of producing an
orphan. A coding agent's run is one user message followed by hundreds of rounds; without the
round boundaries it could never be cut at all.

When a cut falls inside an interaction that starts with a user message, that message (the task)
is sent again verbatim right after the summary (``task_before``): the current task is never
summarized away, and the rule holds whether or not that interaction is still the latest, so the
prompt's prefix does not change when a new user turn arrives.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, islice
from operator import not_, sub
from typing import TypeVar

from proxy.core.summary_message import is_agent_summary
from proxy.types import MessageView

M = TypeVar("M", bound=MessageView)  # the caller's messages come back as it holds them

_PREAMBLE_ROLES = frozenset({"system", "developer"})
_RESULT_ROLES = frozenset({"tool", "function"})


@dataclass(frozen=True, slots=True)
class Grouping:
    """Where the preamble ends, each interaction starts and the list may be cut (indexes into
    the message list)."""

    preamble_len: int
    starts: tuple[int, ...]
    total: int
    safe: tuple[bool, ...]  # safe[k]: cutting right before interaction k separates no tool pair
    # Every safe cut point, ascending: safe interaction starts and safe round boundaries.
    cuts: tuple[int, ...] = ()
    # The end (exclusive) of every tool round, ascending, safe or not (clear_tool_results ages
    # results by the rounds that came after them).
    round_ends: tuple[int, ...] = ()
    first_is_user: bool = True  # interaction 0 starts with a user message
    # Messages the policy pins (``proxy.core.pins``), ascending: sent verbatim whatever the cut.
    pinned: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.starts)

    def span(self, k: int) -> tuple[int, int]:
        """[start, end) of interaction k."""
        end = self.starts[k + 1] if k + 1 < len(self.starts) else self.total
        return self.starts[k], end

    def start_of(self, k: int) -> int:
        """Message index where interaction k starts (``total`` when k is past the end)."""
        return self.starts[k] if k < len(self.starts) else self.total

    def interaction_at(self, message_index: int) -> int:
        """The interaction holding ``message_index`` (-1 inside the preamble)."""
        return bisect_right(self.starts, message_index) - 1

    def safe_at_or_before(self, k: int) -> int:
        """The latest interaction <= k that is a safe cut (keeping more, never less)."""
        while k > 0 and not self.safe[k]:
            k -= 1
        return k

    def is_cut(self, index: int) -> bool:
        """``index`` is a safe cut point: an interaction start or a round boundary."""
        i = bisect_left(self.cuts, index)
        return i < len(self.cuts) and self.cuts[i] == index

    def last_cut(self) -> int:
        """The deepest cut that still keeps the newest round verbatim, or the latest user message
        when its interaction has no complete round yet (preamble_len when there is none)."""
        if not self.starts:
            return self.preamble_len
        last_start = self.starts[-1]
        has_round = bool(self.round_ends) and self.round_ends[-1] > last_start
        limit = self.round_ends[-1] if has_round else last_start + 1
        i = bisect_left(self.cuts, limit) - 1
        return self.cuts[i] if i >= 0 else self.preamble_len

    def task_before(self, cut: int) -> int | None:
        """The user message sent again verbatim when a summary covers messages[:cut]: the first
        message of the interaction ``cut`` falls inside, when that is a user message."""
        starts = self.starts
        k = bisect_right(starts, cut) - 1  # interaction_at, inlined: a deeper cut asks often
        if k < 0 or cut >= self.total or starts[k] == cut or (k == 0 and not self.first_is_user):
            return None
        return starts[k]

    def sent_again(self, cut: int) -> tuple[int, ...]:
        """The messages before ``cut`` sent verbatim after the summary, in order: the pinned
        ones after the preamble and the task message (``task_before``)."""
        task = self.task_before(cut)
        if not self.pinned:
            return () if task is None else (task,)
        again = self.pinned[: bisect_left(self.pinned, cut)]
        if task is None or task in again:
            return again
        return tuple(sorted((*again, task)))

    def kept_messages(self, cut: int) -> int:
        """Messages sent verbatim after the preamble when the verbatim part starts at ``cut`` (the
        pinned ones and the task message before it included)."""
        return self.total - cut + len(self.sent_again(cut))

    def kept_tokens(self, counts: Sequence[int], cut: int) -> int:
        """Tokens of those messages (``counts``: each message's)."""
        return span_sum(counts, cut) + sum(counts[i] for i in self.sent_again(cut))

    def tokens_each(self, counts: Sequence[int]) -> tuple[int, ...]:
        """Each interaction's tokens: differences of the running sum at its bounds (in C)."""
        running = (
            counts.running if isinstance(counts, Summed) else list(accumulate(counts, initial=0))
        )
        at = [running[i] for i in (*self.starts, self.total)]
        return tuple(map(sub, at[1:], at[:-1]))

    def task_tokens(self, counts: Sequence[int], cut: int, pins: set[int]) -> int:
        """Tokens of the task message sent again at ``cut``, unless it is pinned (sent anyway)."""
        task = self.task_before(cut)
        return counts[task] if task is not None and task not in pins else 0


def group(messages: Sequence[MessageView]) -> Grouping:
    """Split ``messages`` into preamble + interactions and find the safe cut points."""
    return _grouping(_scan(messages, None))


class Groupings:
    """The last histories grouped, so that one sent again with messages appended (as most are)
    is read only past what was read of it before: the pass over every message (roles, calls,
    the results that answer them) runs over the new messages alone. A history is found by its
    first message object and holds the list it was read from (its objects stay alive, so that
    identity names them: in the proxy, mostly the very objects of the conversation's last body,
    ``proxy.compaction.reading.LastBodies``); the messages before the new ones must equal those
    it read. Bounded by histories and by the messages they hold. Shared with worker threads: a
    lookup takes a reference, a store is made under a lock, and what is stored never changes."""

    def __init__(self, max_histories: int = 64, max_messages: int = 1 << 17) -> None:
        self.max_histories = max_histories
        self.max_messages = max_messages
        # Each scan with its grouping: a history grouped again (planned twice in one request,
        # or sent again) takes the very grouping (immutable) the last look made.
        self._scans: OrderedDict[int, tuple[_Scan, Grouping]] = OrderedDict()
        self._held = 0  # messages the scans hold
        self._lock = threading.Lock()

    def group(self, messages: Sequence[MessageView]) -> Grouping:
        """``group(messages)``, read from where the last history it extends was read to."""
        if not messages or self.max_histories <= 0:
            return group(messages)
        key = id(messages[0])
        found = self._scans.get(key)
        last = None if found is None else found[0]
        # The messages it read must come first, equal (identical objects compare at C speed).
        if last is not None and (
            len(messages) < len(last.messages) or messages[: len(last.messages)] != last.messages
        ):
            last = None
        if last is not None and found is not None and len(messages) == len(last.messages):
            return found[1]  # the same history again: nothing new to read
        scan = _scan(messages, last)
        grouping = _grouping(scan, None if last is None or found is None else found)
        if len(messages) <= self.max_messages:
            with self._lock:
                old = self._scans.pop(key, None)
                self._held += len(messages) - (0 if old is None else len(old[0].messages))
                self._scans[key] = (scan, grouping)
                while len(self._scans) > self.max_histories or self._held > self.max_messages:
                    _, (dropped, _) = self._scans.popitem(last=False)
                    self._held -= len(dropped.messages)
        return grouping


@dataclass(frozen=True, slots=True)
class _Scan:
    """What one pass over a message list found, enough to go on when messages are appended."""

    messages: list[MessageView]  # the list read (its objects)
    roles: list[object]
    preamble_len: int  # == len(messages) while every message is a preamble message
    call_at: dict[str, int]  # each tool call id -> where its latest call is
    last_function_call: int  # where the latest legacy function_call is (-1: none)
    links: list[tuple[int, int]]  # (call, result) pairs a result answers, in result order
    starts: list[int]  # where each interaction starts
    closed: list[int]  # the round ends before the last message (the last may not end one)
    round_ends: list[int]
    blocked: frozenset[int]  # the boundaries a call and its answer lie across


# Past this many new answers, the boundaries they block are found in one sweep over all.
_MARKED_LINKS = 16


def _scan(messages: Sequence[MessageView], last: _Scan | None) -> _Scan:
    """One pass over ``messages``, going on from ``last`` (which read a prefix of them). Ids may
    be empty or repeated: a result answers the latest call with its id, as providers read them."""
    total = len(messages)
    if last is None:
        start, roles, preamble_len = 0, [], 0
        call_at: dict[str, int] = {}
        last_function_call = -1
        links: list[tuple[int, int]] = []
    else:
        start, preamble_len = len(last.messages), last.preamble_len
        roles = list(last.roles)
        call_at, links = dict(last.call_at), list(last.links)  # the stored scan never changes
        last_function_call = last.last_function_call
    new = messages[start:]
    roles += [m.get("role") for m in new]
    if preamble_len == start:
        while preamble_len < total and roles[preamble_len] in _PREAMBLE_ROLES:
            preamble_len += 1
    for j, message in enumerate(new, start):
        role = roles[j]
        if role == "assistant":
            calls = message.get("tool_calls")
            if isinstance(calls, list):  # tool_call_ids, inlined: this loop sees every message
                for call in calls:
                    if isinstance(call, dict) and isinstance(call_id := call.get("id"), str):
                        call_at[call_id] = j
            if message.get("function_call") is not None:
                last_function_call = j
        elif role == "tool":
            i = call_at.get(message.get("tool_call_id", ""))
            if i is not None and i < j:
                links.append((i, j))
        elif role == "function" and last_function_call >= 0:
            # Legacy functions carry no id: the result answers the latest function_call.
            links.append((last_function_call, j))
    # Interaction starts and round ends before ``start`` are what ``last`` found (a message
    # appended changes neither), unless all it read was preamble.
    p = preamble_len
    if last is None or last.preamble_len == start:
        starts = [i for i in range(p, total) if i == p or roles[i] == "user"]
        closed = [b for b in range(p + 1, total) if _round_end(roles, b)]
        new_links, blocked = links, frozenset[int]()
    else:
        starts = [*last.starts, *(i for i in range(start, total) if roles[i] == "user")]
        closed = [*last.closed, *(b for b in range(start, total) if _round_end(roles, b))]
        new_links, blocked = links[len(last.links) :], last.blocked
    round_ends = [*closed, total] if total > p and roles[total - 1] in _RESULT_ROLES else closed
    if new_links:
        # A call at i answered at j blocks every boundary b with i < b <= j; a new answer
        # (j past ``start``) can block an older boundary, an older one never a new boundary.
        if new_links is links or len(new_links) > _MARKED_LINKS:
            bounds = sorted({*starts, *round_ends})
            safety = _safe_cuts(links, bounds)
            blocked = frozenset(b for b, ok in zip(bounds, safety, strict=True) if not ok)
        else:  # the bounds between each new answer and its call, found in both lists (sorted)
            marked = set(blocked)
            for i, j in new_links:
                for ends in (starts, round_ends):
                    marked.update(ends[bisect_right(ends, i) : bisect_right(ends, j)])
            blocked = frozenset(marked)
    return _Scan(
        list(messages),  # a copy: a caller's list may change in place after it was read
        roles,
        preamble_len,
        call_at,
        last_function_call,
        links,
        starts,
        closed,
        round_ends,
        blocked,
    )


def _round_end(roles: list[object], b: int) -> bool:
    """Whether a tool round ends right before ``b`` (which is not past the last message)."""
    return roles[b - 1] in _RESULT_ROLES and roles[b] not in _RESULT_ROLES


def _grouping(scan: _Scan, last: tuple[_Scan, Grouping] | None = None) -> Grouping:
    """The grouping of ``scan``; ``last``: the scan it went on from, with its grouping, whose
    safe starts and cuts stand while no new answer blocks a boundary before its end."""
    starts, blocked, total = scan.starts, scan.blocked, len(scan.roles)
    if last is not None and _stands(scan, last[0]):
        old, k = last[1], len(last[1].starts)
        new_starts = starts[k:]
        safe = old.safe + tuple(map(not_, map(blocked.__contains__, new_starts)))
        added = set(new_starts).union(scan.closed[len(last[0].closed) :]).difference(blocked)
        cuts = old.cuts + tuple(sorted(added))
        starts_of = old.starts + tuple(new_starts)
    else:
        safe = tuple(map(not_, map(blocked.__contains__, starts)))  # in C
        # Every boundary not blocked: the safe starts, and the round ends before the last one.
        cuts = tuple(sorted(set(starts).union(scan.closed).difference(blocked)))
        starts_of = tuple(starts)
    first_is_user = bool(starts) and scan.roles[starts[0]] == "user"
    return Grouping(
        scan.preamble_len,
        starts_of,
        total,
        safe,
        cuts,
        tuple(scan.round_ends),
        first_is_user,
    )


def _stands(scan: _Scan, last: _Scan) -> bool:
    """Whether what ``last`` found before its end (its starts, closed rounds and blocked
    boundaries) stands in ``scan``, which went on from it: not when all ``last`` read was
    preamble, nor when a new answer blocks an older boundary."""
    end = len(last.messages)
    if last.preamble_len == end:
        return False
    return scan.blocked is last.blocked or all(
        b >= end for b in scan.blocked.difference(last.blocked)
    )


def _safe_cuts(links: list[tuple[int, int]], starts: list[int]) -> tuple[bool, ...]:
    """For each start b: True unless a call at i < b is answered at j >= b (cutting there
    would orphan something)."""
    ordered = sorted(links)
    safe = []
    reach, k = -1, 0
    for start in starts:  # ascending: sweep the links whose call comes before this start
        while k < len(ordered) and ordered[k][0] < start:
            reach = max(reach, ordered[k][1])
            k += 1
        safe.append(reach < start)
    return tuple(safe)


def strip_agent_summaries(
    messages: list[M], *, final_prompt: str | None = None, checked: int = 0
) -> list[M]:
    """Drop summaries this proxy injected that a client echoed back, so two never stack; a
    client's own message using the tag is left alone (``is_agent_summary``; ``final_prompt``:
    the policy's own frame, recognised as well as the built-in one). ``checked``: the first
    messages are known to hold none (an earlier request found none in them, the same objects)."""
    ours = partial(is_agent_summary, final_prompt=final_prompt)
    for message in islice(messages, checked, None):  # a plain loop: faster than any()
        if message.get("role") == "system" and ours(message):
            return [m for m in messages if not ours(m)]
    return messages


class Summed(list[int]):
    """Values per message (tokens) with their running sums, so that a span's sum costs two
    lookups (``span_sum``) instead of a pass over the span (a grouping sums many spans). Never changed once made: a plan
    holds its counts. ``running[i]`` is the sum of the first i values."""

    __slots__ = ("running",)

    def __init__(self, values: Iterable[int] = (), running: list[int] | None = None) -> None:
        super().__init__(values)
        self.running = list(accumulate(self, initial=0)) if running is None else running


def span_sum(values: Sequence[int], start: int = 0, end: int | None = None) -> int:
    """``sum(values[start:end])``, at once when ``values`` carries its running sums."""
    if not isinstance(values, Summed):
        return sum(values[start:end])
    first, last, _ = slice(start, end).indices(len(values))
    running = values.running
    return running[last] - running[first] if last > first else 0
