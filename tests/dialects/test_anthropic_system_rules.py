"""The rules for ``role: "system"`` messages inside an Anthropic ``messages`` list, one by one:
where the adapter places them (``proxy.dialects.anthropic_placement``), that the planner pins
them (never summarized, cleared or dropped, counted against ``keep`` and the window), and what
happens to one a client put between a ``tool_use`` and its ``tool_result``.

Rendered bodies are checked with the mock provider's reading of the API (``problems``)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.policy import KeepSettings, PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from proxy.dialects.anthropic_messages import MESSAGES
from proxy.dialects.anthropic_placement import placed
from tests.dialects.planning import plan_body
from tests.support.anthropic_provider import problems, summaries_in

ALWAYS = TriggerSettings(context_fraction=0, messages=1)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def call(call_id: str) -> dict[str, Any]:
    use = {"type": "tool_use", "id": call_id, "name": "run", "input": {}}
    return {"role": "assistant", "content": [use]}


def result(call_id: str, text: str = "ok") -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {"role": "user", "content": [block]}


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


# --- placement -----------------------------------------------------------------------------------

SEARCHED = {
    "role": "assistant",
    "content": [
        {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
    ],
}


@pytest.mark.parametrize(
    "messages",
    [
        [user("a"), system("s")],
        [user("a"), system("s"), system("t"), assistant("b"), user("c")],
        [user("a"), call("t1"), result("t1"), system("s"), assistant("b")],
        [user("a"), SEARCHED, system("s"), assistant("b")],
    ],
    ids=["last", "a section", "after tool results", "after a server tool result"],
)
def test_a_system_message_the_api_takes_stays_where_it_is(messages: list[dict]) -> None:
    assert problems({"messages": messages}) == []
    assert placed(messages) is messages


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([system("s"), user("a"), assistant("b")], [user("a"), system("s"), assistant("b")]),
        (
            [system("s"), user("a"), system("t"), assistant("b")],
            [user("a"), system("s"), system("t"), assistant("b")],
        ),
        (
            [system("s"), user("a"), user("b"), assistant("c")],
            [user("a"), user("b"), system("s"), assistant("c")],
        ),
        (
            [user("a"), assistant("b"), system("s"), user("c"), assistant("d")],
            [user("a"), assistant("b"), user("c"), system("s"), assistant("d")],
        ),
        ([system("s"), user("a")], [user("a"), system("s")]),
    ],
    ids=["first", "joins a section", "past two users", "after an assistant", "to the end"],
)
def test_one_out_of_place_goes_to_the_first_place_after_it_the_api_takes(
    messages: list[dict], expected: list[dict]
) -> None:
    assert problems({"messages": messages}) != []
    assert placed(messages) == expected
    assert problems({"messages": expected}) == []


# --- pinned by the planner -----------------------------------------------------------------------


def test_a_system_message_before_the_cut_is_sent_never_summarized(counter) -> None:
    body = {
        "model": "claude-test",
        "max_tokens": 64,
        "system": "You code.",
        "messages": [
            user("task one " + "w " * 200),
            system("SKILLS: pdf, xlsx"),
            assistant("done one " + "w " * 200),
            user("task two " + "w " * 200),
            assistant("done two " + "w " * 200),
            user("task three"),
        ],
    }
    policy = PolicySettings(strategy="summarize", mode="inline", trigger=ALWAYS)
    policy = policy.model_copy(update={"keep": KeepSettings(interactions=1)})
    _, plan = plan_body(MESSAGES, body, policy, counter, model="claude-test")
    assert plan.summary_request is not None
    assert "SKILLS" not in str(plan.summary_request.messages)  # the summarizer never reads it
    rendered = MESSAGES.render(body, plan.with_summary("They did two tasks.", checkpoint_id="c"))
    assert problems(rendered) == []
    assert summaries_in(rendered) and "SKILLS" not in str(rendered["system"])
    assert rendered["messages"] == [user("task three"), system("SKILLS: pdf, xlsx")]


def test_the_hard_budget_never_drops_a_system_message(counter) -> None:
    messages = [user("task " + "w " * 50)]
    for n in range(6):
        messages += [call(f"t{n}"), result(f"t{n}", "x " * 300)]
        if n == 1:
            messages.append(system("NEWS: the user wants a changelog"))
    messages.append(assistant("done"))
    messages.append(user("next"))
    body = {"model": "claude-test", "max_tokens": 64, "messages": messages}
    policy = PolicySettings(strategy="trim", trigger=ALWAYS, window_tokens=400)
    policy = policy.model_copy(update={"keep": KeepSettings(interactions=2)})
    _, plan = plan_body(MESSAGES, body, policy, counter, model="claude-test")
    rendered = MESSAGES.render(body, plan)
    assert problems(rendered) == []
    assert len(rendered["messages"]) < len(messages)  # the budget dropped old rounds ...
    assert system("NEWS: the user wants a changelog") in rendered["messages"]  # ... not this
    news = plan.source.index(next(m for m in plan.source if "NEWS" in str(m.get("content"))))
    assert news in plan.grouping.pinned  # counted as kept, whatever the cut


# --- between a tool_use and its tool_result ------------------------------------------------------


def test_a_system_message_inside_a_tool_round_never_separates_the_pair(counter) -> None:
    """The API refuses a system message between a ``tool_use`` and its ``tool_result``. The
    proxy never cuts inside that round (the pair is one round, the system message pinned
    beside it); a body the plan leaves alone goes out as sent (the provider answers its 400, as
    without the proxy); a body the proxy rewrites carries the system message right after the
    result, where the API takes it, and the pair stays adjacent."""
    messages = [
        user("old task " + "w " * 200),
        assistant("old answer " + "w " * 200),
        user("task"),
        call("t1"),
        system("NEWS: also update the changelog"),
        result("t1"),
        assistant("done"),
    ]
    body = {"model": "claude-test", "max_tokens": 64, "messages": messages}
    neutral, plan = plan_body(
        MESSAGES, body, PolicySettings(trigger=TriggerSettings(context_fraction=0)), counter
    )
    assert not plan.changed
    call_at = next(i for i, m in enumerate(neutral) if m.get("tool_calls"))
    for cut in plan.grouping.cuts:  # no cut point inside the round
        assert not call_at < cut <= call_at + 2

    policy = PolicySettings(strategy="trim", trigger=ALWAYS)
    policy = policy.model_copy(update={"keep": KeepSettings(interactions=1)})
    _, plan = plan_body(MESSAGES, body, policy, counter)
    rendered = MESSAGES.render(body, plan)
    assert problems(rendered) == []
    assert rendered["messages"] == [
        user("task"),
        call("t1"),
        result("t1"),
        system("NEWS: also update the changelog"),
        assistant("done"),
    ]


# --- the summary asked on the cached prefix ------------------------------------------------------


def test_a_summary_call_after_a_system_message_joins_its_section() -> None:
    sent = {"model": "claude-test", "max_tokens": 64, "messages": [user("hi"), system("SKILLS")]}
    call_body = MESSAGES.summary_call(sent, "SUMMARIZE", 300)
    assert call_body["messages"][:2] == sent["messages"]
    assert call_body["messages"][2] == {
        "role": "system",
        "content": [{"type": "text", "text": "SUMMARIZE"}],
    }
    assert problems(call_body) == []
