"""Checkpoints: canonical hashing, deepest-match lookup, the extension rule, the record codec."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.checkpoints import (
    Checkpoint,
    Record,
    RecordError,
    chain_hash,
    decode_record,
    encode_record,
    extend,
    find_deepest,
    iter_chain,
)
from proxy.core.digests import HASHED_FIELDS, canonical_message


def history(n: int, *, tag: str = "") -> list[dict[str, Any]]:
    roles = ["user", "assistant"]
    return [{"role": "system", "content": "sys"}] + [
        {"role": roles[i % 2], "content": f"m{i}{tag}"} for i in range(n)
    ]


def make(
    messages: list[dict[str, Any]], covered: int, parent: Checkpoint | None = None
) -> Checkpoint:
    return Checkpoint.create(
        messages, covered=covered, summary="s", parent_id=parent.id if parent else None
    )


def test_canonical_encoding_ignores_key_order_nulls_and_extra_fields() -> None:
    a = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]}
    b = {"tool_calls": [{"type": "function", "id": "1"}], "role": "assistant", "cache": "x"}
    assert canonical_message(a) == canonical_message(b)
    assert canonical_message({"role": "user", "content": ""}) != canonical_message({"role": "user"})


def test_framing_keeps_fields_and_types_apart() -> None:
    assert canonical_message({"role": "ab", "content": "c"}) != canonical_message(
        {"role": "a", "content": "bc"}
    )
    assert canonical_message({"role": "user", "content": "[1]"}) != canonical_message(
        {"role": "user", "content": [1]}
    )
    assert canonical_message({"role": "user", "name": "x"}) != canonical_message(
        {"role": "user", "tool_call_id": "x"}
    )
    # Lone surrogates (possible in JSON input) hash instead of crashing the request.
    assert chain_hash([{"role": "user", "content": "\ud800"}])


@pytest.mark.parametrize("field", HASHED_FIELDS)
def test_every_hashed_field_changes_the_chain(field: str) -> None:
    base = {"role": "tool", "content": "c", "tool_calls": [], "tool_call_id": "t", "name": "n"}
    changed = {**base, field: "other"}
    assert chain_hash([base]) != chain_hash([changed])


def test_a_legacy_function_calls_arguments_are_hashed() -> None:
    """Histories differing only there shared a checkpoint (a foreign summary)."""

    def history(arguments: str) -> list[dict]:
        call = {"name": "delete_files", "arguments": arguments}
        return [
            {"role": "user", "content": "clean up"},
            {"role": "assistant", "content": None, "function_call": call},
            {"role": "function", "name": "delete_files", "content": "done"},
        ]

    assert chain_hash(history('{"path": "/tmp"}')) != chain_hash(history('{"path": "/"}'))


def test_chain_is_incremental_and_order_sensitive() -> None:
    messages = history(5)
    links = list(iter_chain(messages))
    assert links == [chain_hash(messages[: i + 1]) for i in range(len(messages))]
    assert chain_hash(messages[::-1]) != chain_hash(messages)


def test_deepest_matching_checkpoint_wins() -> None:
    messages = history(10)
    shallow = make(messages, 3)
    deep = make(messages, 7, shallow)
    record = Record(owner="o", checkpoints=(deep, shallow))
    assert find_deepest(record, messages) == deep
    assert find_deepest(record, messages[:8]) == deep
    # A history shorter than a checkpoint cannot use it.
    assert find_deepest(record, messages[:5]) == shallow
    assert find_deepest(record, messages[:2]) is None
    assert find_deepest(None, messages) is None


def test_an_edit_inside_a_covered_prefix_invalidates_it() -> None:
    messages = history(10)
    shallow, deep = make(messages, 3), make(messages, 7)
    record = Record(owner="o", checkpoints=(deep, shallow))
    edited = [dict(m) for m in messages]
    edited[5]["content"] = "edited"
    assert find_deepest(record, edited) == shallow
    regenerated = [dict(m) for m in messages]
    regenerated[2]["content"] = "another answer"
    assert find_deepest(record, regenerated) is None


def test_a_fork_reuses_the_shared_prefix() -> None:
    trunk = history(10)
    fork = trunk[:6] + history(6, tag="-fork")[6:]
    root = make(trunk, 5)
    trunk_child = make(trunk, 9, root)
    fork_child = make(fork, 6, root)
    record = Record(owner="o", checkpoints=(fork_child, trunk_child, root))
    assert find_deepest(record, trunk) == trunk_child
    assert find_deepest(record, fork) == fork_child
    assert find_deepest(record, [*fork[:5], {"role": "user", "content": "new"}]) == root


@given(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12),
    st.lists(st.integers(min_value=1, max_value=12), max_size=5),
    st.lists(st.sampled_from(["a", "b", "c"]), max_size=12),
)
def test_a_match_always_covers_an_identical_prefix(
    written: list[str], depths: list[int], incoming: list[str]
) -> None:
    source = [{"role": "user", "content": c} for c in written]
    request = [{"role": "user", "content": c} for c in incoming]
    cps = tuple(make(source, d) for d in depths if d <= len(source))
    found = find_deepest(Record(owner="o", checkpoints=cps), request)
    if found is None:
        assert all(request[: c.covered] != source[: c.covered] for c in cps)
    else:
        assert request[: found.covered] == source[: found.covered]
        assert all(
            c.covered <= found.covered for c in cps if request[: c.covered] == source[: c.covered]
        )


def test_create_checks_the_covered_count() -> None:
    with pytest.raises(ValueError):
        Checkpoint.create(history(2), covered=0, summary="s")
    with pytest.raises(ValueError):
        Checkpoint.create(history(2), covered=4, summary="s")


def test_extension_rule() -> None:
    messages = history(12)
    root = make(messages, 4)
    first = extend(None, root, owner="o", conversation_id="c", max_checkpoints=3)
    assert first is not None and first.checkpoints == (root,)
    child = make(messages, 8, root)
    second = extend(first, child, owner="o", conversation_id="c", max_checkpoints=3)
    assert second is not None and second.checkpoints == (child, root)
    assert extend(second, child, owner="o", conversation_id="c", max_checkpoints=3) is second
    orphan_shallow = make(messages, 6)
    assert extend(second, orphan_shallow, owner="o", conversation_id="c", max_checkpoints=3) is None
    orphan_deep = make(messages, 10)
    third = extend(second, orphan_deep, owner="o", conversation_id="c", max_checkpoints=2)
    assert third is not None and third.checkpoints == (orphan_deep, child)


def test_codec_round_trip_and_compactness() -> None:
    messages = history(4)
    cp = Checkpoint.create(
        messages, covered=3, summary="résumé ✓", summary_tokens=5, model="m", dropped_messages=2
    )
    record = Record(owner="o", checkpoints=(cp,), conversation_id="c", updated_at=1.5)
    raw = encode_record(record)
    assert b" " not in raw.replace(b"r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93", b"")
    assert decode_record(raw) == record


def test_a_summary_with_a_lone_surrogate_round_trips() -> None:
    """A client's lone surrogate may reach a summary: written escaped, read back as it was."""
    cp = Checkpoint.create(history(4), covered=3, summary="odd \ud800 text")
    record = Record(owner="o", checkpoints=(cp,), conversation_id="c", updated_at=1.5)
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"v":2,"owner":"o","conversation_id":"c","updated_at":0,"checkpoints":[]}',
        b'{"v":1,"owner":"o","conversation_id":"c","updated_at":0,"checkpoints":[1]}',
        b'{"v":1,"owner":"o","conversation_id":"c","updated_at":0}',
    ],
)
def test_codec_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(RecordError):
        decode_record(raw)


def test_codec_rejects_wrong_field_types() -> None:
    cp = make(history(3), 2)
    data = json.loads(encode_record(Record(owner="o", checkpoints=(cp,))))
    data["checkpoints"][0]["covered"] = True
    with pytest.raises(RecordError):
        decode_record(json.dumps(data).encode())
    del data["checkpoints"][0]["covered"]
    with pytest.raises(RecordError):
        decode_record(json.dumps(data).encode())
