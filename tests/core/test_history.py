"""Operator changes to a record (proxy.core.history): current, restore, correct."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core import history
from proxy.core.checkpoints import Checkpoint, Record, find_deepest
from tests.support.messages import chat

MESSAGES = chat(8)


def tree() -> tuple[Record, dict[str, Checkpoint]]:
    """root(3) <- a(7) <- b(11), and root <- fork(9) on another branch."""
    root = Checkpoint.create(MESSAGES, covered=3, summary="root")
    a = Checkpoint.create(MESSAGES, covered=7, summary="a", parent_id=root.id)
    b = Checkpoint.create(MESSAGES, covered=11, summary="b", parent_id=a.id)
    fork = dataclasses.replace(
        Checkpoint.create(chat(8, words=3), covered=9, summary="fork"), parent_id=root.id
    )
    record = Record(owner="o", checkpoints=(b, fork, a, root))  # newest first
    return record, {"root": root, "a": a, "b": b, "fork": fork}


def test_restore_retires_descendants_and_brings_ancestors_back() -> None:
    record, cp = tree()
    assert history.current(record) == cp["b"]  # the newest head; fork's head is older
    # Without b, fork's head is the newest: the current one is the last branch written.
    assert history.current(history.restore(record, cp["fork"].id)) == cp["fork"]
    to_a = history.restore(record, cp["a"].id)
    assert to_a.retired == {cp["b"].id}
    assert find_deepest(to_a, MESSAGES) == cp["a"] == history.current(to_a)
    to_root = history.restore(to_a, cp["root"].id)
    assert to_root.retired == {cp["a"].id, cp["b"].id, cp["fork"].id}
    assert history.current(to_root) == cp["root"]
    back = history.restore(to_root, cp["b"].id)  # a retired one, and what it extends, return
    assert back.retired == {cp["fork"].id}
    assert find_deepest(back, MESSAGES) == cp["b"] == history.current(back)
    with pytest.raises(history.UnknownCheckpoint):
        history.restore(record, "0000000000000000")


def test_a_correction_of_an_older_checkpoint_is_current_and_sets_aside_its_descendants() -> None:
    record, cp = tree()
    fixed = history.corrected(cp["a"], "A, corrected", summary_tokens=3, created_at=5.0)
    assert (fixed.covered, fixed.chain, fixed.parent_id) == (7, cp["a"].chain, cp["a"].id)
    changed = history.correct(record, cp["a"].id, fixed, now=5.0, max_checkpoints=8)
    assert changed.checkpoints[0] == fixed and len(changed.checkpoints) == 5
    assert changed.retired == {cp["b"].id}  # built from the text being corrected
    assert history.current(changed) == fixed == find_deepest(changed, MESSAGES)
    # Restoring the original undoes the correction, kept in the history.
    undone = history.restore(changed, cp["a"].id)
    assert find_deepest(undone, MESSAGES) == cp["a"] and fixed.id in undone.retired
    with pytest.raises(ValueError, match="covers exactly"):
        history.correct(record, cp["b"].id, fixed, now=5.0, max_checkpoints=8)


def test_ancestors_end_at_a_missing_parent_or_a_cycle() -> None:
    one = Checkpoint.create(MESSAGES, covered=3, summary="1", parent_id="gone")
    loop = dataclasses.replace(one, parent_id=one.id)
    assert history.ancestors(Record(owner="o", checkpoints=(one,)), one.id) == [one.id]
    assert history.ancestors(Record(owner="o", checkpoints=(loop,)), one.id) == [one.id]
    assert history.descendants(Record(owner="o", checkpoints=(loop,)), one.id) == {one.id}
