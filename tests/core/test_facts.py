"""The per-message fact cache: exact keys, so that a cached validation, count or chain
digest never stands for a message that differs in anything validated, counted or hashed."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from proxy.core.checkpoints import Checkpoint, Record, chain_hash, find_deepest
from proxy.core.digests import message_digest
from proxy.core.facts import FactCache
from proxy.core.messages import validate_messages
from proxy.core.tokens import TokenCounter
from proxy.errors import InvalidMessage
from tests.support.messages import assistant, tool, user

Message = dict[str, Any]


def calls(arguments: Any, **call: Any) -> Message:
    """An assistant turn with one function call."""
    made = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [{**made, **call}]}


# Pairs that Python's == calls equal, or that a key of strings could confuse, but that differ
# in what the provider reads: each must have facts of its own.
LOOKALIKES = [
    ({"role": "user", "content": [{"type": "x", "n": 1}]}, {"role": "user", "content": [{"type": "x", "n": True}]}),
    ({"role": "user", "content": [{"type": "x", "n": 1}]}, {"role": "user", "content": [{"type": "x", "n": 1.0}]}),
    (calls("{}"), calls("{}", type=None)),
    (calls("{}"), {**calls("{}"), "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}),
    (calls("{}"), {**calls("{}"), "function_call": {"name": "f", "arguments": "{}"}}),
    (user("a"), {**user("a"), "name": "bob"}),
    (tool("c1", "out"), tool("c2", "out")),
    (user("a"), {**user("a"), "_hash": ["reasoning"]}),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b"), LOOKALIKES)
def test_lookalike_messages_never_share_facts(a: Message, b: Message) -> None:
    cache = FactCache()
    first, second = cache.scan([a, b])
    assert first is not second
    if message_digest(a) != message_digest(b):
        assert cache.digests([a, b]) == [message_digest(a), message_digest(b)]


def test_equal_content_shares_facts_and_private_fields_do_not_count() -> None:
    cache = FactCache()
    a = {"role": "user", "content": "same"}
    copy = {"content": "same", "role": "user"}  # another object, another key order
    assert cache.scan([a])[0] is cache.scan([copy])[0]
    # An adapter's wire items are neither counted nor hashed (its ``_hash`` is): not keyed.
    wired = {**a, "_wire": [{"type": "message", "id": "1"}]}
    assert cache.scan([wired])[0] is cache.scan([{**a, "_wire": [{"id": "2"}]}])[0]
    assert len(cache) == 2


def test_a_history_edited_in_any_hashed_field_misses_the_checkpoint_through_the_cache(
    counter: TokenCounter,
) -> None:
    history = [user("go"), calls('{"path": "/tmp"}'), tool("c1", "listing"), user("next")]
    checkpoint = Checkpoint.create(history, covered=3, summary="S")
    record = Record(owner="o", checkpoints=(checkpoint,))
    assert find_deepest(record, history, facts=counter.facts) == checkpoint
    for edited in (
        [user("go"), calls('{"path": "/"}'), *history[2:]],
        [user("go"), calls('{"path": "/tmp"}', type="other"), *history[2:]],
        [
            user("go"),
            {**history[1], "function_call": {"name": "g", "arguments": "{}"}},
            *history[2:],
        ],
        [user("go"), history[1], tool("c1", "listing!"), history[3]],
    ):
        assert find_deepest(record, edited, facts=counter.facts) is None
        assert chain_hash(edited[:3], facts=counter.facts) == chain_hash(edited[:3])
    assert find_deepest(record, [dict(m) for m in history], facts=counter.facts) == checkpoint


def test_a_message_validated_before_does_not_vouch_for_a_lookalike() -> None:
    cache = FactCache()
    valid = {"role": "user", "content": "hi"}
    null_name = {"role": "user", "content": "hi", "name": None}
    with cache.request() as facts:
        validate_messages([valid], facts=facts)
        with pytest.raises(InvalidMessage, match="name"):
            validate_messages([null_name], facts=facts)
    with cache.request() as facts:  # a later request: the valid one is known, the other is checked
        assert validate_messages([{"role": "user", "content": "hi"}], facts=facts)
        with pytest.raises(InvalidMessage, match="name"):
            validate_messages([{"role": "user", "content": "hi", "name": None}], facts=facts)


def test_counts_follow_a_message_changed_between_requests(counter: TokenCounter) -> None:
    message = user("short")
    with counter.facts.request() as facts:
        before = counter.with_facts(facts).count_message(message, "gpt-4o")
    message["content"] = "a much longer text than before " * 10
    with counter.facts.request() as facts:
        assert counter.with_facts(facts).count_message(message, "gpt-4o") > before


class Traced(dict):  # a dict that can be watched with a weak reference
    pass


def test_a_view_kept_after_the_request_does_not_keep_its_messages() -> None:
    """A task made during a request may keep the request's view of the cache: the messages
    must still be freed when the request ends."""
    cache = FactCache()
    message = Traced(role="user", content="x" * 1000)
    watch = weakref.ref(message)
    with cache.request() as facts:
        facts.scan([message])
        kept = facts  # what a background job made during the request holds until it runs
    del message
    gc.collect()
    assert watch() is None
    assert kept.scan([user("later")])  # a closed view memoises nothing


def test_the_cache_is_bounded_by_entries_and_by_characters() -> None:
    by_entries = FactCache(max_entries=8)
    by_entries.scan([user(f"message {i}") for i in range(100)])
    assert len(by_entries) <= 8
    by_chars = FactCache(max_chars=10_000)
    by_chars.scan([user(f"{i} " + "x" * 1000) for i in range(100)])
    assert by_chars.chars <= 10_000 and len(by_chars) <= 10
    recent = user("99 " + "x" * 1000)
    assert by_chars.scan([recent])[0] is by_chars.scan([dict(recent)])[0]


def test_the_least_recently_used_go_first() -> None:
    cache = FactCache(max_entries=4)
    hot = assistant("hot")
    known = cache.scan([hot])[0]
    for i in range(20):
        cache.scan([hot, user(f"cold {i}")])
    assert cache.scan([dict(hot)])[0] is known


def test_a_history_carried_from_body_to_body_is_used_when_carried() -> None:
    """A followed body's facts are carried, not looked up (``RequestFacts.carry``): they count
    as used when carried, so what was looked up before goes first."""
    cache = FactCache(max_entries=40)
    history = [user(f"history {i}") for i in range(10)]
    with cache.request() as facts:
        known = validate_messages(history, facts=facts) and facts.scan(history)
    cache.scan([user(f"older {i}") for i in range(20)])
    cache.scan([user("then")])
    with cache.request() as facts:
        validate_messages(history, facts=facts, known=known)
    cache.scan([user(f"newer {i}") for i in range(11)])  # past the bound: trimmed
    assert len(cache) <= 40
    assert all(a is b for a, b in zip(cache.scan([dict(m) for m in history]), known, strict=True))


def test_facts_known_of_more_messages_than_sent_vouch_for_none() -> None:
    cache = FactCache()
    sent = [user("a"), user("b")]
    with cache.request() as facts:
        validate_messages(sent, facts=facts)
        known = facts.scan(sent)
    with cache.request() as facts, pytest.raises(InvalidMessage):
        validate_messages([{"role": "tool", "content": "no id"}], facts=facts, known=known)


def test_worker_threads_sharing_a_small_cache_get_every_count_right(tiktoken_files: object) -> None:
    """Bodies over proxy.compaction.compactor.OFFLOAD_BYTES are counted in worker threads while the event
    loop counts others: a race may cost a recount, never a wrong count."""
    from concurrent.futures import ThreadPoolExecutor

    counter = TokenCounter(cache_size=16)
    histories = [[user(f"{t} {i} " + "word " * (i % 7)) for i in range(60)] for t in range(4)]
    expected = [[TokenCounter().count_message(m, "gpt-4o") for m in h] for h in histories]

    def count(history: list[Message]) -> list[list[int]]:
        rounds = []
        for _ in range(20):
            with counter.facts.request() as facts:
                counted = counter.with_facts(facts).per_message(
                    [dict(m) for m in history], "gpt-4o"
                )
                rounds.append(counted)
        return rounds

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(count, histories))
    for rounds, wanted in zip(results, expected, strict=True):
        assert all(counts == wanted for counts in rounds)
    assert len(counter.facts) <= 16


def history(n: int) -> list[Message]:
    """A coding agent's history of ``n`` rounds, parsed afresh: new objects every call."""
    out: list[Message] = [{"role": "system", "content": "be brief"}, user("fix the bug")]
    for i in range(n):
        out += [calls(f'{{"path": "m{i}.py"}}', id=f"c{i}"), tool(f"c{i}", f"source of m{i}")]
    return out


def test_a_grown_history_gets_the_facts_a_cold_cache_gives(counter: TokenCounter) -> None:
    """The next request sends the history again with messages appended: the messages equal to
    the last request's keep their facts, each changed or new one gets its own."""
    with counter.facts.request() as facts:
        validate_messages(history(5), facts=facts)
        first = facts.scan(history(5))
    grown = history(6)
    grown[4] = tool("c1", "source of m9")  # same length, other text: its own digest and count
    with counter.facts.request() as facts:
        found = facts.scan(grown)
        digests = facts.digests(grown)
    assert found[:4] == first[:4] and found[5:10] == first[5:10]
    assert found[4] is not first[4]
    assert digests == [message_digest(m) for m in grown]
    bad = [*history(6), {"role": "tool", "content": "no id"}]
    with counter.facts.request() as facts, pytest.raises(InvalidMessage, match="tool_call_id"):
        validate_messages(bad, facts=facts)


@pytest.mark.parametrize(
    "changed",
    [
        {"role": "tool", "tool_call_id": "c0", "content": "source of m0", "name": None},
        {
            "role": "tool",
            "tool_call_id": "c0",
            "content": [{"type": "text", "text": "source of m0"}],
        },
        calls('{"path": "m0.py"}', id="c0", type=None),
    ],
)
def test_a_lookalike_in_a_followed_history_has_facts_of_its_own(changed: Message) -> None:
    cache = FactCache()
    with cache.request() as facts:
        before = facts.scan(history(3))
    again = history(3)
    index = 3 if changed["role"] == "tool" else 2
    again[index] = changed
    with cache.request() as facts:
        after = facts.scan(again)
    assert after[index] is not before[index]
    assert after[index + 1 :] == before[index + 1 :]  # found again by key


def test_a_message_changed_in_place_is_not_taken_for_what_it_was(tiktoken_files: object) -> None:
    """A history followed from one request to the next is compared with copies of its messages,
    never with the objects themselves."""
    counter = TokenCounter()
    messages = history(3)
    with counter.facts.request() as facts:
        before = counter.with_facts(facts).per_message(messages, "gpt-4o")
        facts.digests(messages)
    messages[3]["content"] = "a much longer text than before " * 10
    messages[2]["tool_calls"][0]["function"]["arguments"] = '{"path": "elsewhere.py"}'
    with counter.facts.request() as facts:
        after = counter.with_facts(facts).per_message(messages, "gpt-4o")
        digests = facts.digests(messages)
    assert after[3] > before[3]
    assert digests == [message_digest(m) for m in messages]


def test_the_followed_histories_are_bounded_and_keep_no_request_objects() -> None:
    cache = FactCache(max_histories=2)
    for i in range(5):
        cache.scan([user(f"task {i}"), *history(2)])  # no view: nothing followed
    assert not cache._histories
    for i in range(5):
        with cache.request() as facts:
            facts.scan([user(f"task {i}"), *history(2)])
    assert len(cache._histories) == 2
    message = Traced(role="user", content="x" * 1000)
    watch = weakref.ref(message)
    with cache.request() as facts:
        facts.scan([*history(2), message])
    del message
    gc.collect()
    assert watch() is None
    small = FactCache(max_chars=1000)
    with small.request() as facts:
        facts.scan(history(40))  # past half the characters: not followed
    assert not small._histories


def test_a_short_history_is_looked_up_as_it_comes_with_the_same_facts() -> None:
    """Following a history pays for its copies only once it holds a few messages or a long
    text past the first two; a shorter one is looked up by key, to the same facts."""
    cache = FactCache()
    with cache.request() as facts:
        first = facts.scan(history(1))  # four short messages
    assert not cache._histories
    with cache.request() as facts:
        again = facts.scan(history(1))
        digests = facts.digests(history(1))
    assert again == first
    assert digests == [message_digest(m) for m in history(1)]
    pasted = [user("read this"), assistant("go on"), user("a pasted file " * 500)]
    with cache.request() as facts:
        facts.scan(pasted)
    assert len(cache._histories) == 1  # its long text is compared next time, not hashed
    with cache.request() as facts:
        facts.scan(history(3))
    assert len(cache._histories) == 2


def test_a_request_looking_again_at_its_history_gets_the_same_facts() -> None:
    """Within a request, the history and its prefixes are looked at several times: each look
    gets the facts a fresh lookup gives, whatever list it is handed."""
    cache = FactCache()
    messages = history(4)
    other = history(4)
    other[5] = tool("c1", "another text")
    with cache.request() as facts:
        whole = facts.scan(messages)
        assert facts.scan(messages) == whole
        assert facts.scan(messages[:5]) == whole[:5]
        assert facts.scan([]) == []
        # The same length, one other object: found by its own key.
        assert facts.scan([*messages[:5], other[5], *messages[6:]])[5] is not whole[5]
        assert facts.scan(other)[5] is facts.scan([other[5]])[0] is not whole[5]
        # A list the caller changed after it was looked at is looked at as it is now.
        messages[2] = other[5]
        assert facts.scan(messages)[2] is facts.scan([other[5]])[0]
        assert facts.scan(messages)[3:] == whole[3:]
        # A longer list of the same objects: each one found, the new one too.
        longer = [*other, user("next")]
        assert facts.scan(longer)[:-1] == facts.scan(other)
    with cache.request() as facts:
        assert facts.scan(history(4)) == cache.scan(history(4))


def test_a_history_followed_whole_keeps_its_facts_and_a_null_message_is_still_refused() -> None:
    """A history sent again whole takes the last one's facts; a message the last history held
    no copy of (not of a fast shape) is never vouched for by comparison, not even a null in its
    place."""
    cache = FactCache()
    odd = {"role": "user", "content": [{"type": "text", "text": "see"}]}  # no copy kept
    with cache.request() as facts:
        before = facts.scan([*history(3), odd])
        validate_messages([*history(3), odd], facts=facts)
    with cache.request() as facts:
        assert facts.scan([*history(3), odd]) == before
    with cache.request() as facts, pytest.raises(InvalidMessage):
        validate_messages([*history(3), None], facts=facts)
