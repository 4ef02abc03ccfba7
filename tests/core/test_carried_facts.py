"""A body followed from the conversation's last one carries the facts of the items it took
(``ParsedBody.facts``): whatever was carried, validation, counts and digests are those a cold
computation gives, and a bad message after a taken history is still refused."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from proxy.core import resent
from proxy.core.digests import message_digest
from proxy.core.facts import FactCache
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_completions import CHAT
from proxy.errors import InvalidMessage

Message = dict[str, Any]


@pytest.fixture(autouse=True)
def follow_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """These bodies are small, and followed all the same."""
    monkeypatch.setattr(resent, "FOLLOW_BYTES", 0)


def _round(n: int) -> list[Message]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": f"{n}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"source {n} " * (n % 7 + 1)},
    ]


def _read(raw: bytes, last: resent.ParsedBody | None, counter: TokenCounter) -> tuple[Any, ...]:
    """One request read as the Reader reads it: parsed after ``last``, validated, then counted
    and chained; with what a cold cache gives for the same messages."""
    parsed = CHAT.parse(raw, last, True)
    with counter.facts.request() as facts:
        messages = CHAT.conversation(parsed.value, facts=facts, parsed=parsed).messages
        counts = counter.with_facts(facts).per_message(messages, "gpt-4o")
        digests = facts.digests(messages)
        # Lists not a prefix of the history: a short one (looked up by key), then a long one
        # (the carried messages found by identity).
        short = facts.digests([messages[-1], messages[0]])
        later = facts.digests(messages[1:])
    cold = TokenCounter(facts=FactCache())
    assert counts == cold.per_message(messages, "gpt-4o")
    assert digests == [message_digest(m) for m in messages]
    assert later == digests[1:] and short == [digests[-1], digests[0]]
    return parsed, messages


def test_random_histories_growing_and_edited_get_the_facts_a_cold_cache_gives(
    tiktoken_files: object,
) -> None:
    rng = random.Random(30)
    counter = TokenCounter(facts=FactCache(max_entries=64))  # small: entries are evicted too
    history: list[Message] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
    ]
    last = None
    carried = 0
    for step in range(120):
        choice = rng.random()
        if choice < 0.5:
            history = [*history, *_round(step)]
        elif choice < 0.7 and len(history) > 3:  # an earlier turn edited
            at = rng.randrange(2, len(history))
            history = [
                *history[:at],
                {"role": "user", "content": f"edited {step}"},
                *history[at + 1 :],
            ]
        elif choice < 0.85:  # a moved mark: the newest message gains a field
            history = [*history[:-1], {**history[-1], "name": "newest"}]
        raw = orjson.dumps({"model": "m", "messages": history})
        parsed, messages = _read(raw, last, counter)
        assert messages == history
        assert len(parsed.facts) == len(messages)  # kept for the next body
        carried += parsed.reused
        last = parsed
    assert carried > 1000  # the taken items were carried, not only looked up


def test_a_bad_message_after_a_taken_history_is_still_refused(tiktoken_files: object) -> None:
    counter = TokenCounter()
    history = [{"role": "user", "content": "go"}, *_round(1), *_round(2)]
    raw = orjson.dumps({"model": "m", "messages": history})
    parsed, _ = _read(raw, None, counter)
    bad = orjson.dumps({"model": "m", "messages": [*history, {"role": "tool", "content": "no id"}]})
    again = CHAT.parse(bad, parsed, True)
    assert again.reused == len(history)
    with counter.facts.request() as facts, pytest.raises(InvalidMessage, match="tool_call_id"):
        CHAT.conversation(again.value, facts=facts, parsed=again)
    assert again.facts == parsed.facts  # what it carried, nothing of the refused message
    fixed = orjson.dumps({"model": "m", "messages": [*history, *_round(3)]})
    _read(fixed, again, counter)


def test_a_list_other_than_the_bodys_own_carries_nothing(tiktoken_files: object) -> None:
    counter = TokenCounter()
    history = [{"role": "user", "content": "go"}, *_round(1)]
    parsed, _ = _read(orjson.dumps({"model": "m", "messages": history}), None, counter)
    again = CHAT.parse(orjson.dumps({"model": "m", "messages": history}), parsed, True)
    other = {"model": "m", "messages": [{"role": "tool", "content": "no id"}, *history]}
    with counter.facts.request() as facts, pytest.raises(InvalidMessage, match="tool_call_id"):
        CHAT.conversation(other, facts=facts, parsed=again)


def test_a_refused_message_taken_again_with_the_history_is_refused_again(
    tiktoken_files: object,
) -> None:
    """Only the facts of messages that passed are carried: a refused message is taken as parsed
    with the next body, and checked again there."""
    counter = TokenCounter()
    history = [{"role": "user", "content": "go"}, *_round(1), *_round(2)]
    parsed, _ = _read(orjson.dumps({"model": "m", "messages": history}), None, counter)
    bad = [*history, {"role": "tool", "content": "no id"}]
    refused = CHAT.parse(orjson.dumps({"model": "m", "messages": bad}), parsed, True)
    with counter.facts.request() as facts, pytest.raises(InvalidMessage, match="tool_call_id"):
        CHAT.conversation(refused.value, facts=facts, parsed=refused)
    again = CHAT.parse(orjson.dumps({"model": "m", "messages": [*bad, *_round(3)]}), refused, True)
    assert again.reused == len(bad)
    with counter.facts.request() as facts, pytest.raises(InvalidMessage, match="tool_call_id"):
        CHAT.conversation(again.value, facts=facts, parsed=again)
