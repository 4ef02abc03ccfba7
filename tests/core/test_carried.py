"""Carried per-message values: a history sent again (the same message objects, with messages
appended, edited, copied or dropped) gives exactly what a whole computation gives: the values,
the plan, and the checkpoint found."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import TypeVar

import pytest

from proxy.core.carried import Carried
from proxy.core.checkpoints import Checkpoint, Record, find_deepest
from proxy.core.conditions import Condition
from proxy.core.facts import FactCache
from proxy.core.interactions import Summed, group, span_sum, strip_agent_summaries
from proxy.core.pins import PINNED, pinned
from proxy.core.planner import PriorSummary, plan
from proxy.core.policy import ClearToolResultsSettings, KeepSettings, PolicySettings
from proxy.core.policy import TriggerSettings as Trigger
from proxy.core.summary_message import render_summary_message
from proxy.core.tokens import TokenCounter
from proxy.core.triggers import measure
from tests.support.messages import assistant, system, tool, user

V = TypeVar("V")


def _message(rng: random.Random, step: int) -> dict:
    """A message an agent or a client may send next (values of other types at times: ``1``
    and ``True`` are equal, but count and hash apart)."""
    kind = rng.choice(["user", "assistant", "calls", "tool", "tool", "system", "odd", "marked"])
    if kind == "marked":  # a summary of ours echoed back, or a message a dialect pinned
        if rng.random() < 0.5:
            return render_summary_message(f"summary {step}")
        return {**user(f"pinned {step}"), PINNED: True}
    if kind == "user":
        return user(f"u{step} " * rng.randint(1, 30))
    if kind == "system":
        return system(f"s{step}")
    if kind == "calls":
        call = {"id": f"c{step}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "tool":
        return tool(f"c{step - 1}", f"result {step} " * rng.randint(1, 60))
    if kind == "odd":
        return {"role": "user", "content": rng.choice([1, True, 1.0]), "name": "n"}
    return assistant(f"a{step} " * rng.randint(1, 20))


def _next(rng: random.Random, history: list[dict], step: int) -> list[dict]:
    """The next request's history: appended (the very objects first), one message replaced by
    an equal copy, one edited, or the newest dropped."""
    change = rng.random()
    if change < 0.7:
        return history + [_message(rng, step) for _ in range(rng.choice([0, 1, 2, 5]))]
    i = rng.randrange(len(history))
    if change < 0.8:
        return [*history[:i], dict(history[i]), *history[i + 1 :]]
    if change < 0.9:
        return [*history[:i], _message(rng, step), *history[i + 1 :]]
    return history[: rng.randint(1, len(history))]


def _histories(seed: int, steps: int) -> list[list[dict]]:
    """Requests of several conversations, interleaved, more than the carry keeps at once."""
    rng = random.Random(seed)
    conversations = [[system(f"p{k}"), user(f"task {k}")] for k in range(5)]
    out = []
    for step in range(steps):
        k = rng.randrange(len(conversations))
        conversations[k] = _next(rng, conversations[k], step)
        out.append(conversations[k])
    return out


def _values(carried: Carried[V], messages: list[dict], compute: Callable[..., list[V]]) -> list[V]:
    """As a caller uses a carry: the values of the messages past those known, computed."""
    known = carried.known(messages)
    if len(known) < len(messages):
        known += compute(messages[len(known) :])
        carried.keep(messages, known)
    return known


def test_values_carried_are_what_a_whole_computation_gives() -> None:
    carried: Carried[str] = Carried(max_lists=3, max_messages=400)
    computed = []

    def compute(messages: Sequence[object]) -> list[str]:
        computed.append(len(messages))
        return [repr(m) for m in messages]

    for step, history in enumerate(_histories(3, 1500)):
        values = _values(carried, history, compute)
        assert values == [repr(m) for m in history], step
        values.append("the caller's own list")  # never the one carried
    assert carried._lists.messages <= 400 and len(carried._lists) <= 3
    # Appended histories computed only their new messages.
    assert sum(computed) < 0.75 * sum(map(len, _histories(3, 1500)))


def test_a_history_sent_again_computes_only_its_new_messages() -> None:
    carried: Carried[int] = Carried()
    history = [system("p"), user("go"), assistant("ok")]
    asked: list[int] = []

    def compute(messages: Sequence[object]) -> list[int]:
        asked.append(len(messages))
        return [len(str(m)) for m in messages]

    _values(carried, history, compute)
    _values(carried, [*history, user("more")], compute)
    _values(carried, [*history, user("more")][:2], compute)  # a prefix: nothing to compute
    assert asked == [3, 1]
    _values(carried, [history[0], dict(history[1]), history[2]], compute)  # equal, not the same
    assert asked == [3, 1, 3]


POLICIES = [
    PolicySettings(
        trigger=Trigger(context_fraction=0, messages=6), keep=KeepSettings(interactions=1)
    ),
    PolicySettings(
        trigger=Trigger(context_fraction=0, input_tokens=300, interactions=3),
        keep=KeepSettings(fraction=0.3),
        soft_fraction=0.5,
    ),
    PolicySettings(
        trigger=Trigger(context_fraction=0, interaction_tokens=200, conditions=("role == 'user'",)),
        clear_tool_results=ClearToolResultsSettings(older_than_rounds=1, min_tokens=5),
    ),
    PolicySettings(strategy="trim", keep=KeepSettings(interactions=2)),
    PolicySettings(strategy="neuralyze", trigger=Trigger(context_fraction=0, messages=8)),
]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_carried_plan_is_the_plan_of_a_whole_computation(
    policy: PolicySettings, tiktoken_cache_dir: object
) -> None:
    carrying = TokenCounter(facts=FactCache(max_histories=3))
    whole = TokenCounter(facts=FactCache(max_histories=0))  # carries nothing
    rng = random.Random(5)
    for step, history in enumerate(_histories(7, 400)):
        covered = rng.randint(1, len(history))
        prior = rng.choice(
            [None, PriorSummary("earlier", covered, "cp", active=rng.random() < 0.7)]
        )
        with carrying.facts.request() as view:  # a request's messages are carried
            made = [
                plan(history, policy, model="gpt-4o", counter=c, model_info=None, prior=prior)
                for c in (carrying.with_facts(view), whole)
            ]
        assert made[0] == made[1], step
        # As the planner read them before the marks were carried: echoed summaries stripped,
        # the messages a dialect pinned pinned.
        source = strip_agent_summaries(history)
        assert made[0].source == source
        grouping = group(source)
        if policy.strategy != "off" and any(PINNED in m for m in source):
            assert made[0].grouping.pinned == pinned(source, grouping, policy.pin, None), step


def test_a_callers_own_list_is_counted_again_after_it_changed(counter: TokenCounter) -> None:
    """Only a request's messages (a parsed body, never changed) are carried."""
    messages = [system("p"), *(user(f"hi {i}") for i in range(10))]
    before = counter.history_counts(messages, "gpt-4o")
    messages[5]["content"] = "hi " * 50
    assert counter.history_counts(messages, "gpt-4o") == counter.per_message(messages, "gpt-4o")
    assert counter.history_counts(messages, "gpt-4o") != before


def test_a_carried_chain_finds_the_checkpoint_a_whole_computation_finds() -> None:
    carried: Carried[bytes] = Carried(max_lists=3)
    rng = random.Random(9)
    found = 0
    for step, history in enumerate(_histories(11, 600)):
        # Checkpoints made over earlier shapes of the history, and over this one.
        cps = [Checkpoint.create(history, covered=rng.randint(1, len(history)), summary="s")]
        record = Record(owner="o", checkpoints=tuple(cps))
        if rng.random() < 0.5:  # a deeper checkpoint of another branch: never matches
            other = [*history[:-1], user("elsewhere")]
            other_cp = Checkpoint.create(other, covered=len(other), summary="x")
            record = Record(owner="o", checkpoints=(other_cp, *cps))
        facts = FactCache()
        mine = find_deepest(record, history, facts=facts, carried=carried)
        assert mine == find_deepest(record, history), step
        found += mine is not None
    assert found > 300


def test_triggers_measure_as_their_loop_over_interactions_does(counter: TokenCounter) -> None:
    """Without conditions the interactions since a cut are summed at once; a condition every
    message meets takes the loop over interactions: both measure the same."""
    every = ("len(text) >= 0",)
    rng = random.Random(13)
    for history in _histories(17, 300):
        grouping = group(history)
        counts = counter.per_message(history, "gpt-4o")
        since = rng.randint(0, len(history))
        found = [
            measure(
                history,
                counts,
                grouping,
                Trigger(conditions=conditions),
                since=since,
                tokens=0,
                sent_messages=0,
                context_window=None,
            )
            for conditions in ((), every)
        ]
        assert found[0] == found[1], (since, grouping)


@pytest.mark.parametrize("max_lists", [64, 5])  # 5: a history's counts and sums dropped apart
def test_running_sums_carried_are_those_of_the_whole_counts(
    max_lists: int, counter: TokenCounter
) -> None:
    """A history's counts come with the running sums of its counts, carried beside them; any
    span sums as the slice does."""
    carrying = TokenCounter(facts=FactCache(max_histories=3))
    carrying._history_values = Carried(max_lists=max_lists)
    rng = random.Random(21)
    for step, history in enumerate(_histories(23, 400)):
        with carrying.facts.request() as view:
            counts = carrying.with_facts(view).history_counts(history, "gpt-4o")
        whole = counter.per_message(history, "gpt-4o")
        assert counts == whole, step
        if len(history) >= 8:  # carried from there on (CARRY_FROM)
            assert isinstance(counts, Summed)
            assert counts.running == list(accumulate(whole, initial=0)), step
        for _ in range(5):
            start = rng.choice([None, rng.randint(-len(history) - 2, len(history) + 2)])
            end = rng.choice([None, rng.randint(-len(history) - 2, len(history) + 2)])
            assert span_sum(counts, start or 0, end) == sum(whole[start:end]), (step, start, end)


def test_values_kept_together_are_compared_once_and_found_apart() -> None:
    carried: Carried[int] = Carried(max_lists=3)
    history = [system("p"), user("go"), assistant("ok")]
    carried.keep_each(history, {"a": [1, 2, 3], "b": [4, 5, 6]})
    carried.keep(history, [7, 8, 9], "c")
    grown = [*history, user("more")]
    assert carried.known_each(grown, ("a", "b", "c", "d")) == [[1, 2, 3], [4, 5, 6], [7, 8, 9], []]
    assert carried.known_each(history[:2], ("b",)) == [[4, 5]]
    copied = [history[0], dict(history[1]), history[2]]  # equal, not the same objects
    assert carried.known_each(copied, ("a", "b", "c")) == [[], [], []]


def test_a_triggers_conditions_are_evaluated_once_a_message_as_the_history_grows(
    monkeypatch: pytest.MonkeyPatch, tiktoken_cache_dir: object
) -> None:
    """A long chat under ``conditions`` (long-chat.yaml): each verdict of each request asked
    every message again; a message sent again keeps what it was found to be."""
    evaluated: list[object] = []
    matches = Condition.matches
    monkeypatch.setattr(Condition, "matches", lambda c, m: evaluated.append(m) or matches(c, m))
    policy = POLICIES[2]  # interaction_tokens under conditions
    counter = TokenCounter(facts=FactCache(max_histories=3))
    history = [system("p")]
    for turn in range(30):
        history = [*history, user(f"question {turn} " * 5), assistant(f"answer {turn}")]
        whole = plan(history, policy, model="gpt-4o", counter=counter, model_info=None, prior=None)
        evaluated.clear()
        with counter.facts.request() as view:
            made = plan(
                history,
                policy,
                model="gpt-4o",
                counter=counter.with_facts(view),
                model_info=None,
                prior=None,
            )
        assert made == whole, turn
        if turn > 5:
            assert {id(m) for m in evaluated} <= {id(m) for m in history[-2:]}, turn
