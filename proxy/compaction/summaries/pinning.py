"""Replay: which checkpoint a request applies when it pins one with ``X-Compaction-Checkpoint``.

Without the header a request applies the deepest active checkpoint its history matches
(``proxy.core.checkpoints.find_deepest``). With it, the request applies exactly that checkpoint,
retired or not, if the checkpoint summarizes a prefix of this request's history (its hash chain
matches); otherwise it is refused with a 400 before anything is forwarded. A pin is asked for to
reproduce a state, so silently sending another one would defeat it. Two exceptions serve the
request anyway, with the response's ``x-compaction-checkpoint`` saying what was applied: an empty
value (a client echoing the header of a response that applied none) means no pin, and while the
store cannot answer the pin is not enforced (fail open, as every other store failure).

A pinned request is read-only: it makes no summary, so replaying an old state never changes what
the conversation's other requests apply. ``POST /admin/.../checkpoints/{id}/restore`` is the way
to continue from an older checkpoint (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.compaction.protocol import CHECKPOINT_PARAM as _PARAM
from proxy.core.checkpoints import Checkpoint, Record, chain_hash, find_deepest
from proxy.core.digests import Message
from proxy.core.facts import FactLookup
from proxy.errors import InvalidRequest


def choose_checkpoint(
    record: Record | None,
    messages: Sequence[Message],
    pinned: str | None,
    *,
    store_ok: bool = True,
    facts: FactLookup | None = None,
) -> Checkpoint | None:
    """The checkpoint to apply: the pinned one (``protocol.pinned_checkpoint``), else the
    deepest matching one.

    Raises InvalidRequest for a pin this conversation does not hold (while the store answers) or
    whose messages are not a prefix of this history. ``facts`` caches the chain's digests.
    """
    if pinned is None:
        return find_deepest(record, messages, facts=facts)
    found = record.get(pinned) if record is not None else None
    if found is None:
        if not store_ok:
            return find_deepest(record, messages, facts=facts)
        raise InvalidRequest(
            f"{_PARAM}: this conversation has no checkpoint {pinned[:40]!r}",
            param=_PARAM,
            code="unknown_checkpoint",
        )
    if (
        found.covered > len(messages)
        or chain_hash(messages[: found.covered], facts=facts) != found.chain
    ):
        raise InvalidRequest(
            f"{_PARAM}: checkpoint {pinned!r} summarizes the first {found.covered} messages of "
            "another history; this request's messages differ",
            param=_PARAM,
            code="checkpoint_not_on_history",
        )
    return found
