"""The Responses adapter on random well-formed inputs: whatever the planner cuts, the rendered
``input`` is one a strict provider accepts, and a plan that changes nothing changes no byte.

The checks read the rendered items on their own terms (call_id links, item order), never
through the adapter's neutral model.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy import wirejson
from proxy.compaction.models.calibration import prompt_tokens
from proxy.core.clearing import CLEARED_STUB
from proxy.core.interactions import group, strip_agent_summaries
from proxy.core.planner import Plan, plan
from proxy.core.policy import (
    ClearToolResultsSettings,
    KeepSettings,
    PolicySettings,
    TriggerSettings,
)
from proxy.core.summary_message import render_summary_message
from proxy.core.tokens import TokenCounter
from proxy.dialects.responses import RESPONSES
from proxy.errors import InvalidRequest
from tests.dialects.planning import plan_body

Item = dict[str, Any]
_CALL_KINDS = {"function_call", "custom_tool_call", "computer_call"}
_OUTPUT_KINDS = {"function_call_output", "custom_tool_call_output", "computer_call_output"}


def _user(draw: st.DrawFn, n: int) -> Item:
    if draw(st.booleans()):
        return {"role": "user", "content": f"ask {n} " + "w " * draw(st.integers(1, 40))}
    return {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": f"look {n}"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
        ],
    }


def _said(n: int, words: int) -> Item:
    text = f"said {n} " + "w " * words
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call(kind: str, call_id: str) -> Item:
    if kind == "function_call":
        return {"type": kind, "call_id": call_id, "name": "run", "arguments": '{"a": 1}'}
    if kind == "custom_tool_call":
        return {"type": kind, "call_id": call_id, "name": "patch", "input": "*** Begin Patch"}
    return {
        "type": kind,
        "id": f"cu_{call_id}",
        "call_id": call_id,
        "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    }


def _output(kind: str, call_id: str, words: int) -> Item:
    if kind == "computer_call":
        screenshot = {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}
        return {"type": "computer_call_output", "call_id": call_id, "output": screenshot}
    return {"type": f"{kind}_output", "call_id": call_id, "output": "out " + "x " * words}


@st.composite
def responses_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """instructions (maybe), leading system/developer items (maybe), then blocks: user messages,
    assistant text, tool rounds (reasoning items, one to three calls of mixed kinds, a hosted
    web search, outputs in any order), hosted calls alone, an item_reference; may start with
    the assistant and end on an output."""
    items: list[Item] = [
        {"type": "message", "role": draw(st.sampled_from(["system", "developer"])), "content": "r"}
        for _ in range(draw(st.integers(0, 2)))
    ]
    n = 0
    if draw(st.booleans()):
        items.append(_said(n, 3))
    for _ in range(draw(st.integers(1, 14))):
        n += 1
        kind = draw(st.sampled_from(["user", "user", "text", "round", "round", "hosted", "ref"]))
        words = draw(st.integers(1, 60))
        if kind == "user":
            items.append(_user(draw, n))
        elif kind == "text":
            items.append(_said(n, words))
        elif kind == "hosted":
            search = {"type": "web_search_call", "id": f"ws_{n}", "status": "completed"}
            items += [{**search, "action": {"type": "search", "query": "q"}}, _said(n, words)]
        elif kind == "ref":
            items.append({"type": "item_reference", "id": f"msg_{n - 1}"})
        else:
            kinds = draw(st.lists(st.sampled_from(sorted(_CALL_KINDS)), min_size=1, max_size=3))
            calls = [(k, f"call_{n}_{j}") for j, k in enumerate(kinds)]
            for k, call_id in calls:
                if draw(st.booleans()):
                    items.append(
                        {
                            "type": "reasoning",
                            "id": f"rs_{call_id}",
                            "summary": [{"type": "summary_text", "text": "think"}],
                            "encrypted_content": "gAAAA" + call_id,
                        }
                    )
                items.append(_call(k, call_id))
            if draw(st.booleans()):
                items.append({"type": "web_search_call", "id": f"ws_{n}", "status": "completed"})
            for k, call_id in draw(st.permutations(calls)):
                items.append(_output(k, call_id, words))
    if not any(item.get("role") == "user" for item in items):
        items.append(_user(draw, n + 1))
    body: dict[str, Any] = {"model": "gpt-4o", "input": items, "store": False}
    if draw(st.booleans()):
        body["instructions"] = "You are a coding agent."
    return body


def check_valid(rendered: list[Item], original: list[Item]) -> None:
    """What a strict provider checks, read from the items alone."""
    summaries = [i for i, item in enumerate(rendered) if "<agent_summary>" in json.dumps(item)]
    assert len(summaries) <= 1
    preamble = 0
    while original[preamble].get("role") in ("system", "developer"):
        preamble += 1
    assert rendered[:preamble] == original[:preamble]
    if summaries:
        assert summaries == [preamble]
        assert rendered[preamble].keys() == {"type", "role", "content"}
    calls: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(rendered):
        kind = item.get("type")
        if kind in _CALL_KINDS:
            calls.add(item["call_id"])
        elif kind in _OUTPUT_KINDS:
            assert item["call_id"] in calls, "an output without its call before it"
            answered.add(item["call_id"])
        elif kind == "reasoning":
            # Never altered, and still right before the call it came with.
            assert item in original
            assert rendered[i + 1] == _call_after(item, original)
    assert calls <= answered | _unanswered(original), "a call lost its output"


def _call_after(reasoning: Item, original: list[Item]) -> Item:
    return original[original.index(reasoning) + 1]


def _unanswered(original: list[Item]) -> set[str]:
    outputs = {item["call_id"] for item in original if item.get("type") in _OUTPUT_KINDS}
    return {
        item["call_id"]
        for item in original
        if item.get("type") in _CALL_KINDS and item["call_id"] not in outputs
    }


def _plan(
    body: dict[str, Any], counter: TokenCounter, trigger: TriggerSettings, **policy: Any
) -> tuple[list[dict[str, Any]], Plan]:
    return plan_body(RESPONSES, body, PolicySettings(trigger=trigger, **policy), counter)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=responses_bodies(),
    at=st.integers(0, 1000),
    keep=st.sampled_from([KeepSettings(interactions=1), KeepSettings(tokens=200)]),
    clear=st.booleans(),
)
def test_any_cut_renders_an_input_a_strict_provider_accepts(
    counter: TokenCounter, body: dict[str, Any], at: int, keep: KeepSettings, clear: bool
) -> None:
    clearing = ClearToolResultsSettings(older_than_rounds=1, min_tokens=5) if clear else None
    extra = {"clear_tool_results": clearing} if clearing else {}
    messages, p = _plan(body, counter, TriggerSettings(context_fraction=0, messages=1), **extra)
    plans = [p]
    cuts = group(messages).cuts
    if cuts:
        plans.append(p.with_summary("the agent ran the tests", cuts[at % len(cuts)]))
    if p.summary_request is not None:
        plans.append(p.with_summary("S"))
    for each in plans:
        rendered = RESPONSES.render(body, each)
        assert {k: v for k, v in rendered.items() if k != "input"} == {
            k: v for k, v in body.items() if k != "input"
        }
        check_valid(rendered["input"], body["input"])
        for item in rendered["input"]:  # every item is the client's, or a stub of its output
            if item not in body["input"] and "<agent_summary>" not in json.dumps(item):
                assert item["output"].startswith(CLEARED_STUB.split("{")[0])
                assert {**item, "output": None} in [{**i, "output": None} for i in body["input"]]


@settings(max_examples=100, deadline=None)
@given(body=responses_bodies())
def test_a_plan_with_no_cut_changes_no_byte(counter: TokenCounter, body: dict[str, Any]) -> None:
    raw = json.dumps(body, indent=1).encode()
    parsed = RESPONSES.parse(raw).value
    messages, p = _plan(parsed, counter, TriggerSettings(context_fraction=0))
    assert p.messages is messages  # the compactor then sends the client's bytes
    rendered = RESPONSES.render(parsed, p)["input"]
    assert len(rendered) == len(parsed["input"])
    assert all(a is b for a, b in zip(rendered, parsed["input"], strict=True))


def test_an_echoed_summary_item_is_recognised_and_stripped() -> None:
    summary = render_summary_message("earlier work")
    echoed = {"type": "message", "role": "system", "content": summary["content"]}
    as_parts = {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": summary["content"]}],
    }
    task = {"role": "user", "content": "go on"}
    for item in (echoed, as_parts):
        neutral = RESPONSES.conversation(
            {"input": [{"role": "developer", "content": "d"}, item, task]}
        )
        assert neutral is not None
        kept = strip_agent_summaries(neutral.messages)
        assert [m["_wire"] for m in kept] == [[{"role": "developer", "content": "d"}], [task]]


def test_instructions_count_but_never_become_an_item(counter: TokenCounter) -> None:
    body = {"instructions": "rules " * 50, "input": [{"role": "user", "content": "hi"}]}
    neutral = RESPONSES.conversation(body)
    assert neutral is not None
    assert neutral.messages[0]["content"] == body["instructions"]
    assert counter.count_messages(neutral.messages, "gpt-4o") > 50
    _, p = _plan(body, counter, TriggerSettings(context_fraction=0, messages=1))
    summarized = p.with_summary("S", 1)
    assert RESPONSES.render(body, summarized)["instructions"] == body["instructions"]
    assert all(
        "rules" not in json.dumps(item) for item in RESPONSES.render(body, summarized)["input"]
    )


def test_histories_that_differ_only_in_a_reasoning_item_hash_apart() -> None:
    from proxy.core.checkpoints import chain_hash

    def body(secret: str) -> dict[str, Any]:
        reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": secret}
        call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
        return {"input": [{"role": "user", "content": "go"}, reasoning, call]}

    one, two = (RESPONSES.conversation(body(s)) for s in ("gAAAA-1", "gAAAA-2"))
    assert one is not None and two is not None
    assert chain_hash(one.messages) != chain_hash(two.messages)


def test_calibration_reads_the_responses_usage() -> None:
    body = wirejson.encode(
        {
            "object": "response",
            "usage": {
                "input_tokens": 812,
                "input_tokens_details": {"cached_tokens": 700},
                "output_tokens": 9,
            },
        }
    )
    assert prompt_tokens(body) == 812
    completed = {"type": "response.completed", "response": {"usage": {"input_tokens": 77}}}
    sse = b"event: response.completed\ndata: " + wirejson.encode(completed) + b"\n\n"
    assert prompt_tokens(sse) == 77


def test_cleared_tool_results_go_out_as_stubs_of_their_output(counter: TokenCounter) -> None:
    items: list[Item] = [{"role": "user", "content": "AGENT: fix it"}]
    for n, kind in enumerate(
        ["function_call", "custom_tool_call", "computer_call", "function_call"]
    ):
        items += [_call(kind, f"c{n}"), _output(kind, f"c{n}", 300)]
    body = {"input": items}
    clearing = ClearToolResultsSettings(older_than_rounds=1, min_tokens=5)
    _, p = _plan(body, counter, TriggerSettings(context_fraction=0), clear_tool_results=clearing)
    assert p.cleared
    sent = RESPONSES.render(body, p)["input"]
    assert len(sent) == len(items)
    stub = CLEARED_STUB.split("{")[0]
    assert sent[2]["output"].startswith(stub) and sent[4]["output"].startswith(stub)
    assert {**sent[2], "output": ""} == {**items[2], "output": ""}
    assert sent[6] is items[6]  # a screenshot is no text to stub: sent as it came
    assert sent[8] is items[8]  # the newest round is never cleared
    assert [s is i for s, i in zip(sent, items, strict=True)].count(False) == 2


def test_the_providers_own_compaction_item_at_the_head_is_always_kept(
    counter: TokenCounter,
) -> None:
    compacted = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-earlier"}
    items: list[Item] = [compacted]
    for n in range(6):
        items += [{"role": "user", "content": f"step {n} " + "w " * 50}, _said(n, 50)]
    body = {"input": items}
    _, p = _plan(body, counter, TriggerSettings(context_fraction=0, messages=1))
    assert p.grouping.preamble_len == 1
    sent = RESPONSES.render(body, p.with_summary("S"))["input"]
    assert sent[0] is compacted and "<agent_summary>" in json.dumps(sent[1])


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_fields = st.sampled_from(
    [
        "type",
        "role",
        "content",
        "call_id",
        "id",
        "name",
        "arguments",
        "input",
        "output",
        "summary",
        "action",
        "approval_request_id",
        "text",
    ]
)
_kinds = st.sampled_from(
    [
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "reasoning",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "compaction",
        "mcp_approval_response",
        "item_reference",
        "web_search_call",
    ]
)
_hostile_items = st.dictionaries(_fields, _json_values | _kinds, max_size=5) | _json_values


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_hostile_items, min_size=1, max_size=6))
def test_hostile_items_are_a_clean_400_or_plan_and_render(
    counter: TokenCounter, items: list[Any]
) -> None:
    """Never a crash (a 500): a malformed item is an InvalidRequest naming it."""
    body = {"model": "gpt-4o", "input": items}
    try:
        neutral = RESPONSES.conversation(body)
    except InvalidRequest as error:
        assert error.param is not None and error.param.startswith("input[")
        return
    assert neutral is not None
    p = plan(
        neutral.messages,
        PolicySettings(trigger=TriggerSettings(context_fraction=0, messages=1)),
        model="gpt-4o",
        counter=counter,
        model_info=None,
        prior=None,
    )
    wirejson.encode(RESPONSES.render(body, p))
