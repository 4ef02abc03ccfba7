"""Checkpoints: summaries of exact history prefixes, and how a request finds the one it may use.

A checkpoint stands for ``messages[:covered]`` of a conversation (preamble included in the count).
It carries a hash chain over exactly those messages, so a request applies a checkpoint only when
its own prefix hashes to the same chain: an edited, regenerated or forked history never receives a
summary of turns it does not have, and a fork that shares the prefix reuses it
(docs/architecture.md, "State: checkpoints, safe against forks").

A conversation's *record* holds its newest checkpoints first, bounded in number, plus the owner
fingerprint that the store checks on every read (see ``proxy.state.tenancy``). This module is pure: no
I/O, no clock except ``Checkpoint.create``'s default.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy import wirejson
from proxy.core.carried import CARRY_FROM, Carried
from proxy.core.digests import Message, message_digest
from proxy.core.facts import FactLookup

# Versioned seed: a change of canonical encoding must never match chains written by the old one.
# v3: function_call, refusal and audio hashed; one running SHA-256 over JSON arrays (orjson).
# v4: the running SHA-256 is over each message's own SHA-256 (``message_digest``), which is
# cached per message (proxy.core.facts): a history seen before is not hashed again.
_SEED = hashlib.sha256(b"compaction-proxy/chain/v4").digest()

RECORD_VERSION = 1

# The strategy of a summary an operator wrote (``proxy.core.history``): a child of the checkpoint
# it corrects, over the same messages.
EDITED = "edited"


class RecordError(ValueError):
    """A stored record cannot be decoded (corrupt, foreign or from an unknown version)."""


def _digests(messages: Sequence[Message], facts: FactLookup | None) -> list[bytes]:
    if facts is None:
        return [message_digest(m) for m in messages]
    return facts.digests(messages)


def iter_chain(messages: Sequence[Message]) -> Iterator[str]:
    """Yield the chain hash after each message: the i-th value stands for ``messages[:i + 1]``."""
    h = hashlib.sha256(_SEED)
    for message in messages:
        h.update(message_digest(message))
        yield h.copy().hexdigest()


def chain_hash(messages: Sequence[Message], *, facts: FactLookup | None = None) -> str:
    """The chain hash of exactly ``messages``: SHA-256 of the seed and each message's digest in
    order (the empty history hashes to the seed alone). ``facts`` caches the digests."""
    h = hashlib.sha256(_SEED)
    h.update(b"".join(_digests(messages, facts)))
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One summary of ``messages[:covered]``; ``chain`` is ``chain_hash(messages[:covered])``."""

    id: str
    parent_id: str | None
    summary: str
    covered: int
    chain: str
    summary_tokens: int
    model: str
    strategy: str
    created_at: float
    dropped_messages: int = 0
    dropped_tokens: int = 0
    focus: str | None = None  # the X-Compaction-Focus the summary was made with

    @classmethod
    def create(
        cls,
        messages: Sequence[Message],
        *,
        covered: int,
        summary: str,
        parent_id: str | None = None,
        summary_tokens: int = 0,
        model: str = "",
        strategy: str = "summarize",
        dropped_messages: int = 0,
        dropped_tokens: int = 0,
        created_at: float | None = None,
        focus: str | None = None,
    ) -> Checkpoint:
        """A new checkpoint over ``messages[:covered]`` with a fresh id and its chain computed."""
        if not 0 < covered <= len(messages):
            raise ValueError(f"covered={covered} is outside 1..{len(messages)}")
        return cls(
            id=secrets.token_hex(8),
            parent_id=parent_id,
            summary=summary,
            covered=covered,
            chain=chain_hash(messages[:covered]),
            summary_tokens=summary_tokens,
            model=model,
            strategy=strategy,
            created_at=time.time() if created_at is None else created_at,
            dropped_messages=dropped_messages,
            dropped_tokens=dropped_tokens,
            focus=focus,
        )


@dataclass(frozen=True, slots=True)
class Record:
    """A conversation's stored state: newest checkpoints first, and who owns it."""

    owner: str
    checkpoints: tuple[Checkpoint, ...] = ()
    conversation_id: str = ""
    updated_at: float = 0.0
    # Checkpoints an operator set aside by restoring an older one (``proxy.core.history``): kept
    # in the history, never applied or extended by a request that does not pin them.
    retired: frozenset[str] = frozenset()

    def get(self, checkpoint_id: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.id == checkpoint_id), None)

    def active(self) -> Iterator[Checkpoint]:
        """The checkpoints a request may apply, newest first."""
        return (c for c in self.checkpoints if c.id not in self.retired)

    @property
    def depth(self) -> int:
        """Messages covered by the deepest checkpoint (0 when there is none)."""
        return max((c.covered for c in self.checkpoints), default=0)


def find_deepest(
    record: Record | None,
    messages: Sequence[Message],
    *,
    facts: FactLookup | None = None,
    carried: Carried[bytes] | None = None,
) -> Checkpoint | None:
    """The deepest active checkpoint whose chain equals the chain of the same prefix of
    ``messages``.

    The prefix is hashed once, incrementally, only as far as the deepest candidate; ``facts``
    caches each message's digest (a history seen before costs a lookup a message), ``carried``
    the digests of the last histories (one sent again costs a comparison of identities). Among
    checkpoints of equal depth the newest wins (records are newest first).
    """
    if record is None:
        return None
    wanted: dict[int, list[Checkpoint]] = {}
    for cp in record.active():
        if 0 < cp.covered <= len(messages):
            wanted.setdefault(cp.covered, []).append(cp)
    if not wanted:
        return None
    best: Checkpoint | None = None
    deepest = messages[: max(wanted)]
    if carried is None or len(deepest) < CARRY_FROM:
        digests = _digests(deepest, facts)
    else:
        digests = carried.known(deepest)
        if len(digests) < len(deepest):
            digests += _digests(deepest[len(digests) :], facts)
            carried.keep(deepest, digests)
    h = hashlib.sha256(_SEED)
    done = 0
    for depth in sorted(wanted):
        h.update(b"".join(digests[done:depth]))
        done = depth
        link = h.copy().hexdigest()
        best = next((cp for cp in wanted[depth] if cp.chain == link), best)
    return best


def extend(
    record: Record | None,
    checkpoint: Checkpoint,
    *,
    owner: str,
    conversation_id: str,
    max_checkpoints: int,
    now: float | None = None,
) -> Record | None:
    """The record with ``checkpoint`` added, or None when it must not be written.

    The conditional-write rule: a checkpoint is written only if it extends what is
    stored: the record is empty, its parent is still present, or it covers more than anything
    stored. A checkpoint already present returns the record unchanged (an idempotent retry); one
    whose parent an operator retired or corrected meanwhile is refused (it was summarized from a
    set-aside branch or from the text the operator replaced).
    Everything else already stored is kept, newest first, up to ``max_checkpoints``.
    """
    retired: frozenset[str] = frozenset()
    if record is None or not record.checkpoints:
        kept: tuple[Checkpoint, ...] = ()
    else:
        if record.get(checkpoint.id) is not None:
            return record
        if checkpoint.parent_id in record.retired or _corrected(record, checkpoint.parent_id):
            return None
        parent_present = checkpoint.parent_id is not None and record.get(checkpoint.parent_id)
        if not parent_present and checkpoint.covered <= record.depth:
            return None
        kept = record.checkpoints
        retired = record.retired
    checkpoints = (checkpoint, *kept)[:max_checkpoints]
    return Record(
        owner=owner,
        checkpoints=checkpoints,
        conversation_id=conversation_id,
        updated_at=time.time() if now is None else now,
        retired=retired & {c.id for c in checkpoints},
    )


def _corrected(record: Record, checkpoint_id: str | None) -> bool:
    """An operator corrected ``checkpoint_id``: an active correction of it is stored."""
    parent = record.get(checkpoint_id) if checkpoint_id is not None else None
    return parent is not None and any(
        c.parent_id == parent.id and c.strategy == EDITED for c in record.active()
    )


# --- codec: compact JSON ------------------------------------------------------------------------

_CHECKPOINT_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "parent_id": (str, type(None)),
    "summary": (str,),
    "covered": (int,),
    "chain": (str,),
    "summary_tokens": (int,),
    "model": (str,),
    "strategy": (str,),
    "created_at": (int, float),
    "dropped_messages": (int,),
    "dropped_tokens": (int,),
}
# Written only when set, so a record without them reads as before (and older readers skip them).
_OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {"focus": (str,)}


def encode_record(record: Record) -> bytes:
    """Compact JSON bytes of a record (the value stored, before optional sealing)."""
    data = {
        "v": RECORD_VERSION,
        "owner": record.owner,
        "conversation_id": record.conversation_id,
        "updated_at": record.updated_at,
        "checkpoints": [_encode_checkpoint(cp) for cp in record.checkpoints],
    }
    retired = sorted(c.id for c in record.checkpoints if c.id in record.retired)
    if retired:  # absent unless an operator restored: a record without it reads as before
        data["retired"] = retired
    # wirejson: text no UTF-8 encoder takes (a lone surrogate in a model name that came from a
    # client) is written as its JSON escape instead of failing the store.
    return wirejson.encode(data)


def _encode_checkpoint(checkpoint: Checkpoint) -> dict[str, Any]:  # the stored JSON object
    fields = {k: getattr(checkpoint, k) for k in _CHECKPOINT_FIELDS}
    optional = {k: getattr(checkpoint, k) for k in _OPTIONAL_FIELDS}
    return fields | {k: v for k, v in optional.items() if v is not None}


def _checked(obj: Mapping[str, Any], key: str, types: tuple[type, ...]) -> Any:
    value = obj.get(key)
    # bool is an int subclass; a boolean where a count belongs is corruption, not a count.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise RecordError(f"field {key!r} has the wrong type")
    return value


def decode_record(raw: bytes) -> Record:
    """Parse bytes written by ``encode_record``; anything else raises RecordError.

    Read on every request of a stored conversation: orjson (a record holds its summaries, many
    KB, which it parses several times faster), the standard library for what orjson refuses (a
    lone surrogate ``encode_record`` wrote escaped)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RecordError("not JSON") from exc
    if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
        raise RecordError("not a record of a known version")
    items = _checked(data, "checkpoints", (list,))
    checkpoints = []
    for item in items:
        if not isinstance(item, dict):
            raise RecordError("a checkpoint is not an object")
        fields = {k: _checked(item, k, t) for k, t in _CHECKPOINT_FIELDS.items()}
        fields |= {k: _checked(item, k, t) for k, t in _OPTIONAL_FIELDS.items() if k in item}
        checkpoints.append(Checkpoint(**fields))
    retired = data.get("retired", [])
    if not isinstance(retired, list) or not all(isinstance(i, str) for i in retired):
        raise RecordError("field 'retired' has the wrong type")
    return Record(
        owner=_checked(data, "owner", (str,)),
        checkpoints=tuple(checkpoints),
        conversation_id=_checked(data, "conversation_id", (str,)),
        updated_at=float(_checked(data, "updated_at", (int, float))),
        retired=frozenset(retired),
    )
