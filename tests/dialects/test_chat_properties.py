"""The chat completions adapter under random well-formed conversations (the property
tests of each dialect): whatever the cut, the body it renders is a valid chat request (tool pairs
whole, one summary right after the preamble, every other field as sent), and a plan with no cut
leaves the client's messages as the very objects that came, so the compactor sends the client's
bytes."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.interactions import group
from proxy.core.policy import KeepSettings, PolicySettings, TriggerSettings
from proxy.core.summary_message import OPEN_TAG
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_completions import CHAT
from tests.dialects.planning import plan_body
from tests.support.strategies import agent_runs, conversations, tool_pairs_intact

TOOLS = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}]


def body_of(messages: list[dict[str, Any]]) -> bytes:
    """A client's body: other fields around the messages, formatted as a client might."""
    body = {"model": "gpt-4o", "temperature": 0.2, "tools": TOOLS, "messages": messages}
    return json.dumps(body, indent=1).encode()


def planned(body: dict[str, Any], counter: TokenCounter, trigger: TriggerSettings, keep=None):
    policy = PolicySettings(trigger=trigger, keep=keep or KeepSettings(interactions=1))
    return plan_body(CHAT, body, policy, counter)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.one_of(conversations(), agent_runs()),
    at=st.integers(0, 1000),
    keep=st.sampled_from([KeepSettings(interactions=1), KeepSettings(tokens=200)]),
)
def test_any_cut_renders_a_valid_chat_request(
    counter: TokenCounter, messages: list[dict[str, Any]], at: int, keep: KeepSettings
) -> None:
    body = CHAT.parse(body_of(messages)).value
    neutral, p = planned(body, counter, TriggerSettings(context_fraction=0, messages=1), keep)
    plans = [p]
    cuts = group(neutral).cuts
    if cuts:
        plans.append(p.with_summary("the agent ran the tests", cuts[at % len(cuts)]))
    if p.summary_request is not None:
        plans.append(p.with_summary("S"))
    preamble = p.grouping.preamble_len
    for each in plans:
        rendered = CHAT.render(body, each)
        assert {k: v for k, v in rendered.items() if k != "messages"} == {
            k: v for k, v in body.items() if k != "messages"
        }
        sent = rendered["messages"]
        assert tool_pairs_intact(sent)
        assert sent[:preamble] == body["messages"][:preamble]
        summaries = [i for i, m in enumerate(sent) if OPEN_TAG in str(m.get("content"))]
        assert summaries in ([], [preamble])
        # every other message is one the client sent
        assert all(m in body["messages"] for i, m in enumerate(sent) if i not in summaries)


@settings(max_examples=100, deadline=None)
@given(messages=st.one_of(conversations(), agent_runs()))
def test_a_plan_with_no_cut_changes_no_message(
    counter: TokenCounter, messages: list[dict[str, Any]]
) -> None:
    body = CHAT.parse(body_of(messages)).value
    neutral, p = planned(body, counter, TriggerSettings(context_fraction=0))
    assert p.messages is neutral  # the compactor then sends the client's bytes
    assert all(a is b for a, b in zip(neutral, body["messages"], strict=True))
