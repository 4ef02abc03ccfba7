"""How a plan names what it removed (proxy.compaction.recall.notes): stubs name their
handle and tool, a summary ends with a bounded index whose segments cover all it summarized,
handles are stable within a conversation and differ across conversations."""

from __future__ import annotations

import re

from proxy.compaction.recall.answer import matching_lines
from proxy.compaction.recall.covered import Covered, CoveredPieces
from proxy.compaction.recall.notes import annotate
from proxy.config.recall import RecallSettings
from proxy.core.carried import CARRY_FROM
from proxy.core.planner import PriorSummary, plan
from proxy.core.policy import ClearToolResultsSettings, PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from tests.support.messages import assistant, system, tool, user

NEVER = TriggerSettings(context_fraction=0)
CLEAR = ClearToolResultsSettings(older_than_interactions=2)
SETTINGS = RecallSettings()


def agent(steps: int) -> list[dict]:
    messages = [system()]
    for i in range(steps):
        messages += [
            user(f"step {i}"),
            assistant(None, (f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}')),
            tool(f"c{i}", f"file m{i}\n" + "line of output\n" * 200),
            assistant("ok"),
        ]
    return messages


def planned(messages: list[dict], counter: TokenCounter, **kw):
    pol = PolicySettings(trigger=NEVER, clear_tool_results=CLEAR, keep={"interactions": 2})
    kw.setdefault("prior", None)
    return plan(messages, pol, model="gpt-4o", counter=counter, model_info=None, **kw)


def count(counter: TokenCounter):
    return lambda text: counter.count_text(text, "gpt-4o")


def test_stubs_name_tool_arguments_tokens_and_a_stable_handle(counter: TokenCounter) -> None:
    p = planned(agent(5), counter)
    notes = annotate(p, salt="conv-a", settings=SETTINGS, count=count(counter))
    stubs = [m["content"] for m in notes.plan.messages if m["role"] == "tool"][:3]
    for i, stub in enumerate(stubs):
        found = re.fullmatch(
            rf"\[tool result cleared to save context: tool output of read_file src/m{i}\.py, "
            r"[\d,]+ tokens; recall id (r[a-z2-7]{10})\]",
            stub,
        )
        assert found, stub
        assert notes.pieces[found.group(1)].text.startswith(f"file m{i}\n")
    assert notes.plan.tokens_after > p.tokens_after  # the longer stubs are counted
    again = annotate(planned(agent(5), counter), salt="conv-a", settings=SETTINGS, count=len)
    other = annotate(p, salt="conv-b", settings=SETTINGS, count=len)
    assert set(again.pieces) == set(notes.pieces)  # the same bytes every turn
    assert not set(other.pieces) & set(notes.pieces)  # another conversation, other handles


def test_a_summary_ends_with_an_index_whose_segments_cover_what_it_summarized(
    counter: TokenCounter,
) -> None:
    messages = agent(40)
    prior = PriorSummary("SUMMARY", 140, "ck1", active=True)
    settings = RecallSettings(max_result_bytes=4096, index_entries=5)
    p = planned(messages, counter, prior=prior)
    assert p.summary_text == "SUMMARY"
    notes = annotate(p, salt="s", settings=settings, count=len)
    summary = notes.plan.messages[1]["content"]
    index = re.findall(r"^- (r[a-z2-7]{10}): messages (\d+)-(\d+)", summary, re.M)
    segments = [piece for piece in notes.pieces.values() if piece.label.startswith("messages")]
    assert len(index) == 5 < len(segments)  # bounded ...
    assert re.search(rf"^- \({len(segments) - 5} older entries not listed\)$", summary, re.M)
    assert [h for h, _, _ in index] == [s.handle for s in segments[-5:]]  # ... newest listed
    assert all(len(s.text.encode()) <= 4096 for s in segments)  # one recall returns a segment
    covered = "\n".join(s.text for s in segments)
    for i in range(35):  # every summarized tool output is in a segment
        assert f"file m{i}\n" in covered


def test_a_query_returns_the_matching_lines_and_their_neighbours() -> None:
    text = "\n".join(f"line {n}" for n in range(20)) + "\nthe port is 5432\n" + "tail\n" * 10
    got = matching_lines(text, "PORT")
    assert got.splitlines() == [
        "line 17",
        "line 18",
        "line 19",
        "the port is 5432",
        "tail",
        "tail",
        "tail",
    ]
    assert matching_lines(text, "absent").startswith("No line of this original contains")


def test_what_a_summary_covers_is_built_once_and_never_stale(counter: TokenCounter) -> None:
    """Each turn until the next summary sends the same index as a fresh build would; a later
    call that reuses the id of a covered result renames it, as a fresh build names it."""
    prior = PriorSummary("SUMMARY", 140, "ck1", active=True)
    settings = RecallSettings(max_result_bytes=4096)
    remembered = CoveredPieces()

    def both(messages: list[dict]) -> tuple[str, str, str]:
        p = planned(messages, counter, prior=prior)
        fresh = annotate(p, salt="s", settings=settings, count=len)
        kept = annotate(
            p,
            salt="s",
            settings=settings,
            count=len,
            covered_pieces=remembered,
            facts=counter.facts,
        )
        assert kept.pieces == fresh.pieces
        labels = "\n".join(piece.label for piece in kept.pieces.values())
        return fresh.plan.messages[1]["content"], kept.plan.messages[1]["content"], labels

    first = both(agent(40))
    assert first[0] == first[1] and "read_file src/m3.py" in first[2]
    turn = both([*agent(40), user("next")])
    assert turn[:2] == first[:2]  # the covered messages again: the same index
    reused = agent(40)
    reused += [user("again"), assistant(None, ("c3", "grep", '{"pattern": "other"}'))]
    fresh, kept, labels = both(reused)
    assert fresh == kept and "grep other" in labels and "read_file src/m3.py" not in labels


def test_later_messages_checked_once_are_carried_per_entry_never_past_a_reused_id() -> None:
    """A request that sends the last one's later messages (the same objects) with a round
    appended has only the round checked, against the entry's own ids: a round that calls one
    of them again makes the entry unusable, whatever an earlier request or entry found."""
    remembered = CoveredPieces()
    remembered.put("a", Covered([], frozenset({"c3"})))
    remembered.put("b", Covered([], frozenset({"c9"})))
    later = [user(f"u{i}") for i in range(CARRY_FROM)]
    assert remembered.get("a", later) is not None and remembered.get("b", later) is not None
    calls_c9 = [*later, assistant(None, ("c9", "grep", "{}"))]
    assert remembered.get("a", calls_c9) is not None
    assert remembered.get("b", calls_c9) is None  # checked clean for "a", not for "b"
    calls_c3 = [*calls_c9, tool("c9", "x"), assistant(None, ("c3", "grep", "{}"))]
    assert remembered.get("a", calls_c3) is None
    assert remembered.get("a", calls_c9) is not None  # the shorter list, checked before
