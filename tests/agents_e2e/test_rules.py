"""The strict provider refuses what the real APIs refuse: without this, "0 broken histories"
would say nothing. Each rule is broken once on a recorded request of a real agent (so the
shapes are the agents' own), and a refusal comes back in the provider's 400 shape."""

from __future__ import annotations

import copy
from typing import Any

import httpx

from tests.agents_e2e import fixtures, rules
from tests.agents_e2e.session import strict_provider


def last_request(agent: str) -> dict[str, Any]:
    session = fixtures.load(fixtures.FOLDER / f"{agent}.json.gz")
    return copy.deepcopy(session["requests"][-1])


def test_recorded_requests_pass() -> None:
    claude = last_request("claude-code")
    assert rules.anthropic_problems(claude["body"], claude["headers"]["anthropic-beta"]) == []
    assert rules.chat_problems(last_request("opencode")["body"]) == []
    assert rules.chat_problems(last_request("mini-swe-agent")["body"]) == []
    assert rules.responses_problems(last_request("codex")["body"]) == []


def test_anthropic_rules() -> None:
    request = last_request("claude-code-sonnet")
    body = request["body"]
    beta = request["headers"]["anthropic-beta"]
    without_result = copy.deepcopy(body)
    del without_result["messages"][2]["content"][0]  # the first tool_result
    assert any("without `tool_result`" in p for p in rules.anthropic_problems(without_result, beta))
    forged = copy.deepcopy(body)
    thinking = next(b for b in forged["messages"][1]["content"] if b["type"] == "thinking")
    thinking["thinking"] += " (edited)"
    assert any("signature" in p for p in rules.anthropic_problems(forged, beta))
    marked = copy.deepcopy(body)
    for turn in marked["messages"][:5]:
        turn["content"][-1]["cache_control"] = {"type": "ephemeral"}
    assert any("A maximum of 4" in p for p in rules.anthropic_problems(marked, beta))
    merged = copy.deepcopy(body)
    merged["messages"].insert(1, {"role": "user", "content": "again"})
    assert any("alternate" in p for p in rules.anthropic_problems(merged, beta))
    system = last_request("claude-code")["body"]
    assert any(".role:" in p for p in rules.anthropic_problems(system, beta="claude-code-20250219"))


def test_chat_rules() -> None:
    body = last_request("opencode")["body"]
    calls = next(i for i, m in enumerate(body["messages"]) if m.get("tool_calls"))
    unanswered = copy.deepcopy(body)
    del unanswered["messages"][calls + 1]
    assert any("did not have response" in p for p in rules.chat_problems(unanswered))
    orphan = copy.deepcopy(body)
    del orphan["messages"][calls]
    assert any("must be a response" in p for p in rules.chat_problems(orphan))


def test_responses_rules() -> None:
    body = last_request("codex")["body"]
    items = body["input"]
    call = next(i for i, item in enumerate(items) if item.get("type") == "function_call")
    output = next(i for i, item in enumerate(items) if item.get("type") == "function_call_output")
    for index, needle in ((output, "No tool output found"), (call, "No tool call found")):
        broken = copy.deepcopy(body)
        del broken["input"][index]
        assert any(needle in p for p in rules.responses_problems(broken)), needle
    reasoning = call - 1
    assert items[reasoning]["type"] == "reasoning"
    tampered = copy.deepcopy(body)
    tampered["input"][reasoning]["encrypted_content"] = "00." + "0" * 32
    assert any("could not be verified" in p for p in rules.responses_problems(tampered))
    alone = copy.deepcopy(body)
    del alone["input"][reasoning]
    assert any("required 'reasoning' item" in p for p in rules.responses_problems(alone))
    referenced = {**body, "store": False, "input": [*items, {"type": "item_reference", "id": "x"}]}
    assert any("not persisted" in p for p in rules.responses_problems(referenced))


def test_a_refusal_has_the_providers_shape() -> None:
    body = last_request("claude-code-sonnet")["body"]
    del body["messages"][2]["content"][0]
    broken_chat = last_request("mini-swe-agent")["body"]
    del broken_chat["messages"][-1]
    with strict_provider() as servers:
        anthropic = httpx.post(f"{servers.provider_url}/v1/messages", json=body)
        chat = httpx.post(f"{servers.provider_url}/v1/chat/completions", json=broken_chat)
    assert anthropic.status_code == 400
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "invalid_request_error"
    assert chat.status_code == 400
    assert set(chat.json()["error"]) == {"message", "type", "param", "code"}
