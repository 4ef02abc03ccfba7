"""What a plan removed, named so the model can fetch it back (docs/recall.md).

Two kinds of piece are kept: a tool result the plan cleared (its stub now names its handle and
what it was) and, under a summary, what the summary covers, as a plain transcript cut into
segments one recall returns whole. The summary message ends with a short index of the segments. A handle is a keyed hash of the piece within its conversation (``Tenancy.recall_salt``):
the same piece always gets the same handle there, so the prompt's bytes stay stable across turns
(the provider's cache), and the same piece in another conversation gets another one.

The plan in, the annotated plan and the pieces out; what is carried from request to request
(a summary's segments, the stubs' originals) is kept by the carriers passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.compaction.recall.calls import (
    ARGS_CHARS,
    Calls,
    call_parts,
    calls_by_id,
    one_line,
    text_of,
    tool_calls,
)
from proxy.compaction.recall.covered import (
    Covered,
    CoveredPieces,
    Piece,
    calls_one_of,
    handle_of,
)
from proxy.compaction.recall.stubs import StubHistories, name_stubs
from proxy.config.recall import RecallSettings
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.summary_message import CLOSE_TAG, OPEN_TAG
from proxy.types import ChatMessage

TRUNCATED = "\n[recall truncated: ask again with a query to see a part]"
_INDENT = "  "  # a segment's continuation lines: only a message's first line is unindented


@dataclass(frozen=True)
class Notes:
    """A plan annotated for recall, and what it refers to (handle -> piece: read, never
    changed, the same object for each request that refers to the same)."""

    plan: Plan
    pieces: dict[str, Piece]


def annotate(
    plan: Plan,
    *,
    salt: str,
    settings: RecallSettings,
    count: Callable[[str], int],
    covered_pieces: CoveredPieces | None = None,
    facts: FactLookup | None = None,
    stubs: StubHistories | None = None,
) -> Notes:
    """``plan`` with its stubs naming their handles and its summary ending with an index; the
    pieces they name. ``count``: a text's tokens, to keep ``tokens_after`` true to what is sent.
    A plan that removed nothing comes back as it is, with no pieces. With ``covered_pieces``
    and ``facts`` (the request's), what a summary covers is built once for all the requests
    that send it; with ``stubs``, a stub's original is named once for all of them."""
    if not plan.changed or (not plan.cleared and plan.summary_text is None):
        return Notes(plan, {})
    source = plan.source
    # Read only for a plan that cleared results: only then may a message be a core's stub.
    history = stubs.of(source, salt) if stubs is not None and plan.cleared else None
    known: list[Calls] = [] if history is None else [history.calls]

    def calls() -> Calls:  # parsing every call's arguments: only when a piece is built
        if not known:
            known.append(calls_by_id(source))
        return known[0]

    pieces: dict[str, Piece] = {}
    messages = list(plan.messages)
    changed: list[int] = []  # where ``messages`` differs from the plan's
    if plan.cleared:
        name_stubs(plan, salt, calls, history, messages, changed, pieces)
    if plan.summary_text is not None:
        covered = _covered(salt, plan, settings, calls, covered_pieces, facts)
        if pieces:
            for piece in covered.pieces:
                pieces.setdefault(piece.handle, piece)
        else:  # the summary's own, shared by every request that sends it (never changed)
            pieces = covered.by_handle
        at = _summary_at(messages)
        if at is not None and covered.pieces:
            index = covered.index(settings)
            head = text_of(messages[at].get("content"))[: -len(CLOSE_TAG)].rstrip("\n")
            messages[at] = {**messages[at], "content": f"{head}\n\n{index}\n{CLOSE_TAG}"}
            changed.append(at)
    if not pieces:
        return Notes(plan, {})
    added = sum(
        count(text_of(messages[n].get("content"))) - count(text_of(plan.messages[n].get("content")))
        for n in changed
    )
    return Notes(plan.sending(messages, plan.tokens_after + added), pieces)


def _covered(
    salt: str,
    plan: Plan,
    settings: RecallSettings,
    calls: Callable[[], Calls],
    remembered: CoveredPieces | None,
    facts: FactLookup | None,
) -> Covered:
    """``_covered_pieces``, from ``remembered`` when it holds them for these messages."""
    source, start, end = plan.source, plan.grouping.preamble_len, plan.cut
    if remembered is None or facts is None:
        return Covered(_covered_pieces(salt, source, start, end, settings, calls())[0])
    tag = (salt, settings.max_result_bytes, start)
    covered = remembered.held(source, end, tag)
    if covered is not None:
        return covered
    later = source[end:]
    key = (*tag, end, *facts.scan(source[:end]))
    covered = remembered.get(key, later)
    if covered is None:
        covered = _building(salt, plan, settings, calls, remembered.base(source, end, tag))
        if calls_one_of(later, covered.ids):  # named as a later call names them: this once
            return covered
        remembered.put(key, covered)
    remembered.hold(source, end, tag, covered)
    return covered


def _building(
    salt: str,
    plan: Plan,
    settings: RecallSettings,
    calls: Callable[[], Calls],
    base: tuple[Covered, int] | None,
) -> Covered:
    """What the summary covers, packed from the last segment of ``base`` (the entry of fewer of
    these messages, and how many) when there is one, else from the start."""
    source, start, end = plan.source, plan.grouping.preamble_len, plan.cut
    if base is None:
        pieces, firsts = _covered_pieces(salt, source, start, end, settings, calls())
        return Covered(pieces, frozenset(_ids(source[start:end])), firsts)
    last, covered = base
    first = last.firsts[-1]
    # Only the calls its messages name: the others' arguments are not parsed.
    named = calls_by_id(source, only=_ids(source[first:end]))
    pieces, firsts = _covered_pieces(salt, source, start, end, settings, named, resume=first)
    ids = last.ids | _ids(source[covered:end])
    return Covered([*last.pieces[:-1], *pieces], ids, [*last.firsts[:-1], *firsts])


def _ids(messages: list[ChatMessage]) -> set[str]:
    """The call ids ``messages`` make or answer."""
    ids: set[str] = set()
    for message in messages:
        ids.update(str(c.get("id")) for c in tool_calls(message))
        if message.get("role") in ("tool", "function"):
            ids.add(str(message.get("tool_call_id")))
    return ids


def _covered_pieces(
    salt: str,
    source: list[ChatMessage],
    start: int,
    end: int,
    settings: RecallSettings,
    calls: Calls,
    *,
    resume: int | None = None,
) -> tuple[list[Piece], list[int]]:
    """Under a summary: what it covers (``source[start:end]``), as a transcript packed oldest
    first into segments of at most ``max_result_bytes`` (one recall returns a whole segment),
    with where each begins. Packing from the start is stable: a later summary covering more
    keeps the earlier segments, handles and all (and may pack from where one began: ``resume``)."""
    limit = settings.max_result_bytes - len(TRUNCATED)
    pieces: list[Piece] = []
    firsts: list[int] = []
    lines: list[str] = []
    names: list[str] = []
    size = 0
    first = start if resume is None else resume

    def close(last: int) -> None:
        text = "\n".join(lines)
        label = f"messages {first - start + 1}-{last - start}"
        if names:
            listed = ", ".join(dict.fromkeys(names))
            label += ": " + (
                listed if len(listed) <= ARGS_CHARS else listed[: ARGS_CHARS - 1] + "…"
            )
        pieces.append(Piece(handle_of(salt, "segment", text), label, text))
        firsts.append(first)

    for n in range(first, end):
        line = _line(source[n], calls)
        grow = len(line.encode("utf-8", "surrogatepass")) + 1
        if lines and size + grow > limit:
            close(n)
            lines, names, size, first = [], [], 0, n
        lines.append(line)
        names.extend(_names(source[n], calls))
        size += grow
    if lines:
        close(end)
    return pieces, firsts


def _names(message: ChatMessage, calls: Calls) -> list[str]:
    """The tools a message called, as "name args" in brief."""
    found = []
    for call in tool_calls(message):
        name, args = calls.get(str(call.get("id")), ("tool", ""))
        found.append(f"{name} {args}".strip())
    return found


def _line(message: ChatMessage, calls: Calls) -> str:
    """One message of a segment: its role, then its text, each further line of it indented, so
    that a line of a tool's output never reads as a turn of its own."""
    role = str(message.get("role"))
    text = text_of(message.get("content"))
    if role in ("tool", "function"):
        name, args = calls.get(str(message.get("tool_call_id")), ("tool", ""))
        head = f"tool output of {name} {args}".rstrip()
    else:
        head = one_line(role, ARGS_CHARS)
        for call in tool_calls(message):
            name, arguments = call_parts(call)
            shown = arguments if isinstance(arguments, str) else text_of(arguments)
            text += f"\n[calls {one_line(name, ARGS_CHARS)} {shown}]"
    return f"{head}: " + text.replace("\n", "\n" + _INDENT)


def _summary_at(messages: list[ChatMessage]) -> int | None:
    for n, message in enumerate(messages):
        content = message.get("content")
        if (
            message.get("role") == "system"
            and isinstance(content, str)
            and content.startswith(OPEN_TAG)
            and content.endswith(CLOSE_TAG)
            and "_wire" not in message
        ):
            return n
    return None
