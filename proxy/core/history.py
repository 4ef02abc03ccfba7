"""An operator's changes to a conversation's checkpoints: which one is current, restoring an older
one, and correcting a summary. Pure functions over a ``Record`` (the store runs them in its
compare-and-set loop, ``Store.change``).

Checkpoints form a tree through ``parent_id``: each summary extends the one it was made from, and
a correction is a child with the same coverage and hash chain as what it corrects. *Restoring* a
checkpoint retires its descendants (kept in the history, never applied or extended again) and
brings it and its ancestors back, so the next request applies it and the next summary extends it.
Branches that are not its descendants (a forked history's own summaries) are left alone.
"""

from __future__ import annotations

import dataclasses
import secrets

from proxy.core.checkpoints import EDITED, Checkpoint, Record


class UnknownCheckpoint(LookupError):
    """The record holds no checkpoint with that id."""


def current(record: Record) -> Checkpoint | None:
    """The checkpoint an operator means by "the current one": the newest active checkpoint that
    no active one extends (the head of the branch written or restored last; on one linear
    history, the deepest)."""
    extended = {c.parent_id for c in record.active()}
    return next((c for c in record.active() if c.id not in extended), None)


def ancestors(record: Record, checkpoint_id: str) -> list[str]:
    """``checkpoint_id`` and the stored checkpoints it extends, nearest first."""
    by_id = {c.id: c for c in record.checkpoints}
    chain: list[str] = []
    node = by_id.get(checkpoint_id)
    while node is not None and node.id not in chain:  # a cycle only in a corrupt record
        chain.append(node.id)
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    return chain


def descendants(record: Record, checkpoint_id: str) -> set[str]:
    """Every stored checkpoint that extends ``checkpoint_id``, directly or through others."""
    children: dict[str, list[str]] = {}
    for checkpoint in record.checkpoints:
        if checkpoint.parent_id is not None:
            children.setdefault(checkpoint.parent_id, []).append(checkpoint.id)
    found: set[str] = set()
    stack = list(children.get(checkpoint_id, ()))
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(children.get(node, ()))
    return found


def restore(record: Record, checkpoint_id: str) -> Record:
    """The record with ``checkpoint_id`` current again; raises UnknownCheckpoint.

    It moves to the front, as if just written: it is the newest head (``current``), and the
    last to give way when the record is bounded."""
    restored = record.get(checkpoint_id)
    if restored is None:
        raise UnknownCheckpoint(checkpoint_id)
    retired = (record.retired - set(ancestors(record, checkpoint_id))) | descendants(
        record, checkpoint_id
    )
    others = tuple(c for c in record.checkpoints if c.id != checkpoint_id)
    return dataclasses.replace(record, checkpoints=(restored, *others), retired=frozenset(retired))


def correct(
    record: Record, target_id: str, correction: Checkpoint, *, now: float, max_checkpoints: int
) -> Record:
    """The record with ``correction`` (a child of ``target_id`` over the same messages) as the
    current checkpoint; ``target_id`` stays in the history. Raises UnknownCheckpoint."""
    target = record.get(target_id)
    if target is None:
        raise UnknownCheckpoint(target_id)
    if correction.parent_id != target.id or (correction.covered, correction.chain) != (
        target.covered,
        target.chain,
    ):
        raise ValueError("a correction covers exactly what it corrects and names it as parent")
    restored = restore(record, target_id)
    return dataclasses.replace(
        restored,
        checkpoints=(correction, *restored.checkpoints)[:max_checkpoints],
        updated_at=now,
    )


def corrected(
    target: Checkpoint, summary: str, *, summary_tokens: int, created_at: float
) -> Checkpoint:
    """A new checkpoint with ``summary`` standing for exactly what ``target`` covers."""
    return dataclasses.replace(
        target,
        id=secrets.token_hex(8),  # as Checkpoint.create
        parent_id=target.id,
        summary=summary,
        summary_tokens=summary_tokens,
        model="",  # no summarizer wrote it
        strategy=EDITED,
        created_at=created_at,
    )
