"""Grouping into preamble + interactions, safe cuts, and stripping echoed summaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.interactions import group, strip_agent_summaries
from proxy.core.summary_message import render_summary_message
from tests.support.messages import assistant, system, tool, user
from tests.support.strategies import agent_runs, conversations, tool_pairs_intact


def test_preamble_then_one_interaction_per_user_message() -> None:
    messages = [
        system(),
        {"role": "developer", "content": "dev"},
        user("a"),
        assistant(None, ("c1", "ls", "{}")),
        tool("c1", "x"),
        assistant("done"),
        user("b"),
        user("c"),
        system("mid-conversation note"),
        assistant("ok"),
    ]
    g = group(messages)
    assert g.preamble_len == 2
    assert g.starts == (2, 6, 7)
    assert [g.span(k) for k in range(len(g))] == [(2, 6), (6, 7), (7, 10)]
    assert all(g.safe)


def test_messages_before_the_first_user_message_form_interaction_zero() -> None:
    g = group([system(), assistant("Hi! What can I do?"), user("fix the bug"), assistant("ok")])
    assert g.preamble_len == 1
    assert g.starts == (1, 2)


def test_only_preamble_has_no_interactions() -> None:
    g = group([system(), system("more")])
    assert (g.preamble_len, len(g)) == (2, 0)


def test_a_tool_answer_after_the_next_user_message_makes_that_boundary_unsafe() -> None:
    # Malformed but seen in the wild: the user interjects before the tool result arrives.
    messages = [
        user("a"),
        assistant(None, ("c1", "ls", "{}")),
        user("b"),
        tool("c1", "x"),
        user("c"),
    ]
    g = group(messages)
    assert g.starts == (0, 2, 4)
    assert g.safe == (True, False, True)
    assert g.safe_at_or_before(1) == 0


def test_legacy_function_result_is_bound_to_its_call() -> None:
    messages = [
        user("a"),
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        user("b"),
        {"role": "function", "name": "f", "content": "late"},
    ]
    assert group(messages).safe == (True, False)


def test_strip_agent_summaries_removes_only_echoed_summaries() -> None:
    kept = [system(), user("a"), system("<agent_summary> is a tag we use")]
    echoed = render_summary_message("old summary")
    messages = [kept[0], echoed, kept[1], kept[2]]
    assert strip_agent_summaries(messages) == [kept[0], kept[1], kept[2]]
    assert strip_agent_summaries(kept) is kept  # nothing to strip: no copy


@given(conversations())
def test_every_safe_interaction_boundary_keeps_tool_pairs_whole(messages: list[dict]) -> None:
    g = group(messages)
    assert g.starts == tuple(sorted(g.starts))
    for k in range(len(g)):
        if g.safe[k]:
            cut = g.start_of(k)
            assert tool_pairs_intact(messages[: g.preamble_len] + messages[cut:])


def test_round_boundaries_inside_one_task_are_cut_points() -> None:
    messages = [
        system(),
        user("fix the failing tests"),
        assistant(None, ("a", "sh", "{}"), ("b", "sh", "{}")),
        tool("b", "out b"),
        tool("a", "out a"),
        assistant("now the second file"),
        assistant(None, ("c", "sh", "{}")),
        tool("c", "out c"),
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": ""}},
        {"role": "function", "name": "f", "content": "legacy"},
    ]
    g = group(messages)
    assert g.starts == (1,)
    assert g.cuts == (1, 5, 8)  # never between a call and its results; not past the end
    assert g.round_ends == (5, 8, 10)
    assert g.last_cut() == 8  # the newest round (the legacy call) stays
    assert [g.task_before(c) for c in (1, 5, 8)] == [None, 1, 1]


def test_a_user_message_inside_a_round_blocks_the_boundaries_it_spans() -> None:
    messages = [
        system(),
        user("task"),
        assistant(None, ("a", "sh", "{}")),
        tool("a", "1"),
        assistant(None, ("b", "sh", "{}")),
        user("are you done?"),
        tool("b", "2"),
        assistant(None, ("c", "sh", "{}")),
        tool("c", "3"),
    ]
    g = group(messages)
    assert g.cuts == (1, 4, 7)  # 5 (the interjection) and 6 would orphan call b
    assert g.task_before(7) == 5


@given(st.one_of(conversations(), agent_runs()))
def test_every_cut_point_keeps_tool_pairs_whole_with_the_task_sent_again(
    messages: list[dict],
) -> None:
    g = group(messages)
    assert list(g.cuts) == sorted(set(g.cuts))
    for cut in g.cuts:
        task = g.task_before(cut)
        again = [messages[task]] if task is not None else []
        assert tool_pairs_intact(messages[: g.preamble_len] + again + messages[cut:])
        assert task is None or messages[task]["role"] == "user"
