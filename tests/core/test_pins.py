"""Pins: messages a policy says must never be summarized, cleared or dropped."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from proxy.core.facts import FactCache
from proxy.core.interactions import group
from proxy.core.pins import PINNED, pinned, to_summarize
from proxy.core.plan_view import describe_plan
from proxy.core.planner import PriorSummary
from proxy.core.policy import (
    ClearToolResultsSettings,
    KeepSettings,
    PolicySettings,
)
from proxy.core.summary_message import OPEN_TAG
from proxy.core.tokens import TokenCounter
from tests.core.test_planner import ALWAYS, policy, run  # the planner tests' own helpers
from tests.support.messages import assistant, chat, system, tool, user
from tests.support.strategies import agent_runs, conversations, tool_pairs_intact

USERS = ('role == "user"',)


def summary_at(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if OPEN_TAG in str(m.get("content"))]


def test_pinned_user_messages_travel_verbatim_in_order_after_the_summary(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    p = run(messages, policy(pin=USERS), counter)
    request = p.summary_request
    assert request is not None and (request.start, request.covered) == (1, 17)
    # The summary reads only what is not pinned: the eight old answers.
    assert list(request.messages) == [messages[i] for i in range(2, 17, 2)]

    done = p.with_summary("Eight answers were given.", checkpoint_id="cp1")
    sent = done.messages
    assert summary_at(sent) == [1]
    old_questions = [messages[i] for i in range(1, 17, 2)]
    assert sent[2:10] == old_questions  # verbatim, in their order, the very same dicts
    assert all(a is b for a, b in zip(sent[2:10], old_questions, strict=True))
    assert sent[10:] == messages[17:]  # then the kept interactions
    # What the admin API's preview and the dry run show of it.
    assert describe_plan(done)["pinned_messages"] == list(range(1, 21, 2))
    assert done.tokens_after == counter.count_messages(sent, "gpt-4o")


def test_the_next_turn_with_the_checkpoint_sends_the_same_prefix(counter: TokenCounter) -> None:
    """Pins depend on the history only: the checkpoint's turn and the next one share the
    prompt's prefix (its chain is over the client's history, which pins do not change)."""
    messages = chat(10)
    pol = policy(pin=USERS)
    first = run(messages, pol, counter).with_summary("S", checkpoint_id="cp1")
    later = [*messages, user("question 10"), assistant("answer 10")]
    prior = PriorSummary("S", 17, "cp1", active=True)
    second = run(later, pol, counter, prior=prior)
    assert second.applied_checkpoint == "cp1"
    assert second.messages[: len(first.messages)] == first.messages


def test_a_pinned_tool_result_is_never_cleared_and_brings_its_whole_round(
    counter: TokenCounter,
) -> None:
    big = "line of output\n" * 80
    messages = [
        system(),
        user("read the spec and the code"),
        assistant(None, ("c1", "read_spec", "{}"), ("c2", "read_file", '{"path": "a.py"}')),
        tool("c1", "SPEC " + big),
        tool("c2", "CODE " + big),
        assistant("read both"),
        *chat(4, preamble=False),
    ]
    pol = policy(
        pin=('tool == "read_spec"',),
        keep=KeepSettings(interactions=1),
        clear_tool_results=ClearToolResultsSettings(older_than_interactions=1),
    )
    p = run(messages, pol, counter)
    # The call and both of its results are pinned: a result never travels without its call.
    assert p.grouping.pinned == (2, 3, 4)
    assert p.cleared == ()  # pinned results are never stubbed
    done = p.with_summary("S")
    sent = done.messages
    assert tool_pairs_intact(sent)
    assert sent[2:5] == messages[2:5]
    assert sent[3]["content"].startswith("SPEC ") and sent[4]["content"].startswith("CODE ")
    assert not any(m is messages[1] for m in sent)  # the old task itself was summarized

    unpinned = run(
        messages, policy(keep=pol.keep, clear_tool_results=pol.clear_tool_results), counter
    )
    assert unpinned.cleared == (3, 4)  # the same results, not pinned, are stubbed


def test_expressions_see_role_text_tool_calls_and_turn() -> None:
    messages = [
        system(),
        user("first task #keep"),
        assistant(None, ("c1", "run_tests", "{}")),
        tool("c1", "3 failed"),
        assistant("fixed"),
        user("second task"),
        assistant("ok"),
    ]
    grouping = group(messages)

    def chosen(*expressions: str) -> tuple[int, ...]:
        return pinned(messages, grouping, expressions)

    assert chosen('contains("#keep")') == (1,)
    assert chosen('"run_tests" in calls') == (2, 3)
    assert chosen('tool == "run_tests" and "failed" in text') == (2, 3)
    assert chosen('role == "user" and turn == 1') == (5,)
    assert chosen('role == "assistant" and not calls') == (4, 6)
    assert chosen('message.get("content") == "ok"') == (6,)
    assert chosen("text.nope()", 'role == "system"') == ()  # errors do not match; preamble: no pin


@pytest.mark.parametrize("expression", ['open("x")', "import os", "a = 1", "x.__class__"])
def test_a_bad_pin_is_refused_when_the_policy_is_built(expression: str) -> None:
    with pytest.raises(ValidationError, match="not a valid pin"):
        PolicySettings(pin=(expression,))


def test_pins_count_against_keep_tokens(counter: TokenCounter) -> None:
    messages = chat(10, words=40)
    per_interaction = counter.count_messages(messages[1:3], "gpt-4o")
    keep = KeepSettings(tokens=3 * per_interaction)
    plain = run(messages, policy(keep=keep), counter)
    with_pins = run(messages, policy(keep=keep, pin=USERS), counter)
    # The pinned old questions take room that the verbatim turns had: fewer turns are kept.
    assert with_pins.summary_request is not None and plain.summary_request is not None
    assert with_pins.summary_request.covered > plain.summary_request.covered


def test_the_window_never_drops_a_pin_even_when_pins_alone_exceed_it(
    counter: TokenCounter,
) -> None:
    messages = chat(12, words=40)
    pins_tokens = counter.count_messages(messages[1:21:2], "gpt-4o")
    window = pins_tokens // 2  # the pinned questions alone are twice the budget
    p = run(messages, policy(strategy="trim", pin=USERS, window_tokens=window), counter)
    sent = p.messages
    for question in messages[1::2]:
        assert any(m is question for m in sent)  # every pinned question is still sent
    assert sent[-2:] == messages[-2:]
    assert p.tokens_after > window  # over the budget: the provider will say so, nothing is hidden
    assert p.tokens_after == counter.count_messages(sent, "gpt-4o")


def test_neuralyze_keeps_pins_where_old_turns_are_dropped(counter: TokenCounter) -> None:
    messages = chat(6)
    p = run(messages, policy(strategy="neuralyze", pin=('contains("question 1 ")',)), counter)
    assert p.messages[1:3] == [messages[3], messages[9]]  # the pin, then the kept turns
    assert p.messages[2:] == messages[9:]


policies = st.builds(
    PolicySettings,
    strategy=st.sampled_from(["summarize", "neuralyze", "trim"]),
    trigger=st.just(ALWAYS),
    keep=st.sampled_from(
        [KeepSettings(interactions=0), KeepSettings(interactions=1), KeepSettings(tokens=80)]
    ),
    clear_tool_results=st.builds(
        ClearToolResultsSettings, older_than_interactions=st.integers(0, 2)
    ),
    window_tokens=st.sampled_from([0, 60, 300]),
    pin=st.sampled_from(
        [USERS, ('role == "tool"',), ('role == "assistant"',), ('contains("1")',), ()]
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.one_of(conversations(), agent_runs()), pol=policies, force=st.booleans())
def test_any_plan_sends_every_pin_verbatim_in_order_with_pairs_intact(
    counter: TokenCounter, messages: list[dict], pol: PolicySettings, force: bool
) -> None:
    p = run(messages, pol, counter, force=force, budget_tokens=150 if force else 0)
    results = [p] if p.summary_request is None else [p, p.with_summary("S")]
    pins = p.grouping.pinned
    for result in results:
        sent = result.messages
        assert tool_pairs_intact(sent)
        positions = [next(k for k, m in enumerate(sent) if m is messages[i]) for i in pins]
        assert positions == sorted(positions)  # all there, verbatim, in order
        assert len(summary_at(sent)) <= 1
        if result.summary_request is not None:
            assert not any(m is messages[i] for i in pins for m in result.summary_request.messages)


def test_answers_remembered_per_message_still_depend_on_where_it_sits() -> None:
    """The same text at another turn, or a result of another tool, is judged again."""
    cache = FactCache()
    same = [system(), user("again"), assistant("a"), user("other"), assistant("b")]
    same += [user("again"), assistant("c")]
    grouping = group(same)
    with cache.request() as facts:
        first = pinned(same, grouping, ('turn == 2 and text == "again"',), facts.scan(same))
    with cache.request() as facts:
        again = pinned(same, grouping, ('turn == 2 and text == "again"',), facts.scan(same))
        other = pinned(same, grouping, ("turn == 0",), facts.scan(same))
    assert first == again == (5,)
    assert other == (1, 2)
    results = [
        system(),
        user("go"),
        assistant(None, ("c1", "read_spec", "{}")),
        tool("c1", "same output"),
        assistant(None, ("c2", "read_file", "{}")),
        tool("c2", "same output"),
    ]
    with cache.request() as facts:
        found = pinned(results, group(results), ('tool == "read_file"',), facts.scan(results))
    assert found == (4, 5)


def test_a_message_a_dialect_pinned_is_pinned_without_any_pin_setting(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    messages[3] = {**messages[3], PINNED: True}  # an instruction the dialect says is pinned
    p = run(messages, policy(), counter)
    request = p.summary_request
    assert request is not None and messages[3] not in request.messages
    assert p.grouping.pinned == (3,)
    sent = p.with_summary("Old turns.", checkpoint_id="cp").messages
    assert sent[2] is messages[3]  # sent again right after the summary
    assert to_summarize(messages, (), 1, 17) == tuple(
        m for i, m in enumerate(messages[1:17], start=1) if i != 3
    )
