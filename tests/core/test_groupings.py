"""Groupings: a history sent again with messages appended is grouped from where it was read
before, and groups exactly as a first reading of it would (``group``)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.interactions import Groupings, group
from tests.support.messages import assistant, system, tool, user
from tests.support.strategies import agent_runs, conversations


def _message(rng: random.Random, step: int, open_calls: list[str]) -> dict:
    """Any message an agent or a client may send next, ids repeated or empty at times."""
    kind = rng.choice(["user", "assistant", "calls", "tool", "tool", "system", "function", "fc"])
    if kind == "user":
        return user(f"u{step}")
    if kind == "system":
        return system(f"s{step}")
    if kind == "calls":
        ids = [rng.choice([f"c{step}_{k}", "", "dup"]) for k in range(rng.randint(1, 3))]
        open_calls.extend(ids)
        calls = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    if kind == "tool":
        call_id = rng.choice(open_calls) if open_calls and rng.random() < 0.8 else "stray"
        return tool(call_id, f"r{step}")
    if kind == "fc":
        return {"role": "assistant", "content": None, "function_call": {"name": "f"}}
    if kind == "function":
        return {"role": "function", "name": "f", "content": "r"}
    return assistant(f"a{step}")


def test_histories_sent_again_group_as_a_first_reading_does() -> None:
    rng = random.Random(11)
    groupings = Groupings(max_histories=4)
    histories: list[list[dict]] = [[system("p")] for _ in range(6)]  # some past the memo's size
    calls: list[list[str]] = [[] for _ in histories]
    for step in range(1500):
        k = rng.randrange(len(histories))
        history, change = histories[k], rng.random()
        if change < 0.7:  # appended: the same objects first, as a body parsed after the last
            n = rng.choice([0, 1, 2, 3, 30])  # past _MARKED_LINKS answers at once, at times
            history = history + [_message(rng, step, calls[k]) for _ in range(n)]
        elif change < 0.8:  # one replaced by an equal copy: equal, not identical
            i = rng.randrange(len(history))
            history = [*history[:i], dict(history[i]), *history[i + 1 :]]
        elif change < 0.9:  # one edited
            i = rng.randrange(len(history))
            history = [*history[:i], _message(rng, step, calls[k]), *history[i + 1 :]]
        else:  # the newest dropped
            history = history[: rng.randint(1, len(history))]
        histories[k] = history
        assert groupings.group(history) == group(history), step


@settings(max_examples=200)
@given(st.one_of(conversations(), agent_runs()), st.data())
def test_any_history_read_in_two_parts_groups_as_a_whole(messages: list[dict], data) -> None:
    split = data.draw(st.integers(0, len(messages)))
    groupings = Groupings()
    if split:
        groupings.group(messages[:split])
    assert groupings.group(messages) == group(messages)


def test_a_history_of_preamble_only_goes_on_into_its_interactions() -> None:
    groupings = Groupings()
    first = [system("a"), system("b")]
    assert groupings.group(first).preamble_len == 2
    then = [*first, system("c"), user("go"), assistant("ok")]
    assert groupings.group(then) == group(then)
    assert groupings.group(then).preamble_len == 3


def test_the_histories_kept_are_bounded_by_count_and_by_messages() -> None:
    groupings = Groupings(max_histories=3, max_messages=50)
    histories = [[system(f"p{k}"), *(user(f"u{k}.{i}") for i in range(10))] for k in range(5)]
    for history in histories:
        assert groupings.group(history) == group(history)
    assert len(groupings._scans) == 3 and groupings._held == 33
    big = [system("big"), *(user(f"b{i}") for i in range(45))]
    assert groupings.group(big) == group(big)
    assert groupings._held <= 50 and list(groupings._scans.values())[-1][0].messages == big
    huge = [system("huge"), *(user(f"h{i}") for i in range(60))]
    assert groupings.group(huge) == group(huge)  # grouped, but past the bound: not kept
    assert all(scan.messages[0] is not huge[0] for scan, _ in groupings._scans.values())


def test_a_history_grouped_again_takes_the_grouping_made_before() -> None:
    """Planned twice in one request (the price trigger's candidate), or sent again: the
    grouping is not built again; one message more, or one edited, is read again."""
    groupings = Groupings()
    history = [system("p"), user("go"), assistant("ok"), user("more")]
    first = groupings.group(history)
    assert groupings.group(history) is first
    assert groupings.group([*history]) is first  # the same objects in another list
    grown = [*history, assistant("done")]
    assert groupings.group(grown) is not first and groupings.group(grown) == group(grown)
    edited = [*history[:-1], assistant("instead")]
    assert groupings.group(edited) == group(edited) != first


def test_an_answer_that_blocks_an_older_boundary_groups_as_a_whole() -> None:
    """The cuts and safe starts found before stand, as the history grows, until a new answer
    lies across one of them (a late tool result, after the next user message)."""
    call = {"id": "late", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        system("p"),
        user("go"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    history += [user("meanwhile"), assistant("ok"), user("and")]
    groupings = Groupings()
    assert groupings.group(history) == group(history)
    grown = [*history, tool("late", "done")]  # blocks the starts before it
    assert groupings.group(grown) == group(grown)
    assert not groupings.group(grown).safe[1]
    more = [*grown, assistant("fine"), user("next")]
    assert groupings.group(more) == group(more)


def test_a_list_changed_in_place_groups_as_it_now_is() -> None:
    """A caller may edit its list between two plans (the planner's callers outside a request
    do): what was read of it before is what it held then, not what it holds now."""
    rng = random.Random(7)
    for _ in range(200):
        groupings = Groupings()
        open_calls: list[str] = []
        messages = [_message(rng, step, open_calls) for step in range(rng.randint(2, 30))]
        groupings.group(messages)
        edit = rng.choice(["pop", "del", "insert", "replace"])
        at = rng.randrange(len(messages))
        if edit == "pop":
            messages.pop()
        elif edit == "del":
            del messages[at]
        elif edit == "insert":
            messages.insert(at, _message(rng, 99, open_calls))
        else:
            messages[at] = _message(rng, 98, open_calls)
        if messages:
            assert groupings.group(messages) == group(list(messages)), edit
