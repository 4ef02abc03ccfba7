"""What a summary covers, carried from request to request (``CoveredPieces``: by the identity
of the covered messages, and from the last summary's segments when the next covers more): always
what a fresh build over the request's messages makes, whatever the history did meanwhile."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.compaction.recall import stubs as stubs_module
from proxy.compaction.recall.covered import CoveredPieces
from proxy.compaction.recall.notes import Notes, annotate
from proxy.compaction.recall.stubs import StubHistories, StubHistory, tool_piece
from proxy.config.recall import RecallSettings
from proxy.core.planner import PriorSummary, plan
from proxy.core.policy import ClearToolResultsSettings, PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from tests.support.messages import assistant, system, tool, user

NEVER = TriggerSettings(context_fraction=0)
SUMMARY_ONLY = PolicySettings(trigger=NEVER, keep={"interactions": 2})
CLEARING = PolicySettings(
    trigger=NEVER,
    clear_tool_results=ClearToolResultsSettings(older_than_interactions=2),
    keep={"interactions": 2},
)
CLEARING_ROUNDS = PolicySettings(
    trigger=NEVER,
    clear_tool_results=ClearToolResultsSettings(older_than_rounds=3),
    keep={"interactions": 2},
)
SETTINGS = RecallSettings(max_result_bytes=1024, index_entries=4)


def step(i: int, call_id: str) -> list[dict[str, Any]]:
    return [
        user(f"step {i}"),
        assistant(None, (call_id, f"tool{i % 3}", f'{{"path": "src/m{i}.py"}}')),
        tool(call_id, f"file m{i}\n" + f"line {i}\n" * (i % 7 * 20 + 5)),
        assistant(f"ok {i}"),
    ]


def both(
    messages: list[dict[str, Any]],
    counter: TokenCounter,
    remembered: CoveredPieces,
    *,
    covered: int,
    salt: str,
    policy: PolicySettings,
    stubs: StubHistories | None = None,
) -> tuple[Notes, Notes] | None:
    """(the notes of a fresh build, the notes carried), or None when the plan has no summary
    (covered 0: none asked) and clears nothing."""
    prior = PriorSummary("SUMMARY", covered, "ck", active=True) if covered else None
    p = plan(messages, policy, model="gpt-4o", counter=counter, model_info=None, prior=prior)
    if p.summary_text is None and not p.cleared:
        return None
    fresh = annotate(p, salt=salt, settings=SETTINGS, count=len)
    kept = annotate(
        p,
        salt=salt,
        settings=SETTINGS,
        count=len,
        covered_pieces=remembered,
        facts=counter.facts,
        stubs=stubs,
    )
    return fresh, kept


def same(fresh: Notes, kept: Notes) -> None:
    assert list(kept.pieces.items()) == list(fresh.pieces.items())
    assert kept.plan.messages == fresh.plan.messages
    assert kept.plan.tokens_after == fresh.plan.tokens_after


@pytest.mark.parametrize("seed", range(6))
def test_carried_notes_are_what_a_fresh_build_makes(
    counter: TokenCounter, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two conversations interleaved (stubs of cleared results or not, a summary or not), each growing a round at a time (a new list of the same
    message objects), its summary covering more now and then (or less), messages replaced by
    equal copies or edited ones, the list cut short, a later call reusing a covered id
    (appended or in a later message's place): the notes are the fresh build's every time, and
    the carried paths are taken."""
    rng = random.Random(seed)
    remembered = CoveredPieces(max_entries=8, max_held=4)
    used = {"held": 0, "base": 0}
    held, base = remembered.held, remembered.base

    def counting_held(*args: Any) -> Any:
        found = held(*args)
        used["held"] += found is not None
        return found

    def counting_base(*args: Any) -> Any:
        found = base(*args)
        used["base"] += found is not None
        return found

    remembered.held = counting_held  # type: ignore[method-assign]
    remembered.base = counting_base  # type: ignore[method-assign]
    named = {"inside": 0, "named": 0, "stubs": 0}  # stubs carried, originals named anew
    stub = StubHistory.stub

    def counting_stub(self: StubHistory, salt: str, original: dict[str, Any], tokens: str) -> Any:
        named["stubs"] += 1
        named["inside"] = 1
        try:
            return stub(self, salt, original, tokens)
        finally:
            named["inside"] = 0

    def counting_tool_piece(*args: Any) -> Any:
        named["named"] += named["inside"]
        return tool_piece(*args)

    monkeypatch.setattr(StubHistory, "stub", counting_stub)
    monkeypatch.setattr(stubs_module, "tool_piece", counting_tool_piece)
    stubs = StubHistories(max_histories=1)
    histories: dict[str, list[dict[str, Any]]] = {}
    covering: dict[str, int] = {}
    for name in "ab":
        histories[name] = [system(f"system {name}")]
        for i in range(6):
            histories[name] += step(i, f"{name}{i}")
        covering[name] = 9
    policy = {"a": SUMMARY_ONLY, "b": rng.choice([CLEARING, CLEARING_ROUNDS])}
    summarized = {"a": True, "b": rng.random() < 0.5}
    for turn in range(6, 80):
        name = rng.choice("ab")
        last = histories[name]
        roll = rng.random()
        history = list(last)  # a parsed body's taken prefix: the same objects
        if roll < 0.08:
            at = rng.randrange(1, len(history))
            history[at] = {**history[at], "content": f"edited {turn}"}
        elif roll < 0.16:
            at = rng.randrange(1, len(history))
            history[at] = dict(history[at])  # equal, another object
        elif roll < 0.22:
            del history[rng.randrange(covering[name] + 1, len(history) + 1) :]
        elif roll < 0.3 and len(history) > covering[name] + 2:  # a later call, now of an old id
            at = rng.randrange(covering[name] + 2, len(history))
            again = (f"{name}{rng.randrange(4)}", "grep", f'{{"pattern": "{turn}"}}')
            history[at] = assistant(None, again)
        reused = rng.random() < 0.1 and covering[name] > 4
        call_id = f"{name}{rng.randrange(6)}" if reused else f"{name}{turn}"
        if rng.random() < 0.8:
            history += step(turn, call_id)
        if rng.random() < 0.25:  # a next summary: mostly further on
            move = rng.choice([-4, 4, 4, 8, 8, 12])
            covering[name] = max(3, min(len(history) - 4, covering[name] + move))
        histories[name] = history
        found = both(
            history,
            counter,
            remembered,
            covered=covering[name] if summarized[name] else 0,
            salt=name,
            policy=policy[name],
            stubs=stubs,
        )
        if found is not None:
            same(*found)
    assert used["held"] and used["base"]
    assert named["named"] < named["stubs"] / 2  # most stubs' originals were named before


def test_a_covering_named_by_a_later_call_is_not_kept_for_a_history_without_it(
    counter: TokenCounter,
) -> None:
    """A later call reusing a covered id renames it this once; the next request that sends
    the covered messages without that call gets them named as a fresh build names them."""
    remembered = CoveredPieces()
    messages = [system()]
    for i in range(8):
        messages += step(i, f"c{i}")
    reused = [*messages, user("again"), assistant(None, ("c3", "grep", '{"pattern": "x"}'))]
    fresh, kept = both(reused, counter, remembered, covered=25, salt="s", policy=SUMMARY_ONLY) or (
        pytest.fail("no summary")
    )
    same(fresh, kept)
    assert any("grep x" in piece.label for piece in kept.pieces.values())
    edited = [*messages, user("again"), assistant("no call this time")]
    found = both(edited, counter, remembered, covered=25, salt="s", policy=SUMMARY_ONLY)
    assert found is not None
    same(*found)
    assert not any("grep x" in piece.label for piece in found[1].pieces.values())


def test_the_summary_pieces_are_one_object_while_the_summary_stays(counter: TokenCounter) -> None:
    """Each turn until the next summary refers to the very same pieces (the tool's store of
    originals looks them through once)."""
    remembered = CoveredPieces()
    messages = [system()]
    for i in range(8):
        messages += step(i, f"c{i}")
    first = both(messages, counter, remembered, covered=25, salt="s", policy=SUMMARY_ONLY)
    grown = both(
        [*messages, *step(8, "c8")], counter, remembered, covered=25, salt="s", policy=SUMMARY_ONLY
    )
    assert first is not None and grown is not None
    assert grown[1].pieces is first[1].pieces
    assert grown[1].pieces == grown[0].pieces


def test_a_stub_is_named_after_the_last_call_of_its_id_whatever_was_carried() -> None:
    """The original of a stub is named once while the call of its id stays the same; a later
    call of that id renames it, as a fresh naming does."""
    histories = StubHistories()
    messages = [system(), *step(0, "c0"), *step(1, "c1")]
    original = messages[3]
    first = histories.of(messages, "s")
    piece, text = first.stub("s", original, "120")
    assert piece == tool_piece("s", original, first.calls) and "tool0 src/m0.py" in piece.label
    assert first.stub("s", original, "120") == (piece, text) and "120 tokens" in text
    assert "1,300 tokens" in first.stub("s", original, "1300")[1]
    grown = [*messages, user("again"), assistant(None, ("c0", "grep", '{"pattern": "x"}'))]
    again = histories.of(grown, "s")
    renamed, text = again.stub("s", original, "120")
    assert renamed == tool_piece("s", original, again.calls) and renamed.label.endswith("grep x")
    assert "grep x, 120 tokens" in text
