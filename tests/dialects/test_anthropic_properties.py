"""The Anthropic Messages adapter on random well-formed conversations, and its unit-sized rules.

The rendered body is checked with the mock provider's own reading of the format
(tests/support/anthropic_provider.py), never with the adapter's code.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from proxy import wirejson
from proxy.config.settings import parse_settings
from proxy.core.checkpoints import chain_hash
from proxy.core.planner import Plan
from proxy.core.policy import (
    ClearToolResultsSettings,
    KeepSettings,
    PolicySettings,
    TriggerSettings,
)
from proxy.core.tokens import TokenCounter
from proxy.dialects.anthropic_messages import MESSAGES
from proxy.errors import InvalidRequest, PayloadTooLarge, UpstreamTimeout, UpstreamUnavailable
from proxy.proxying.targets import AnthropicTarget, OpenAITarget, targets
from proxy.types import HeaderView
from tests.dialects.planning import plan_body
from tests.support.anthropic_provider import cache_marks, problems, summaries_in, system_texts

Body = dict[str, Any]
MARK = {"type": "ephemeral"}
NEVER = TriggerSettings(context_fraction=0)
ALWAYS = TriggerSettings(context_fraction=0, messages=1)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def maybe_marked(draw: st.DrawFn, block: dict[str, Any]) -> dict[str, Any]:
    if draw(st.integers(0, 4)) == 0:
        block["cache_control"] = MARK
    return block


@st.composite
def bodies(draw: st.DrawFn) -> Body:
    """A request as an agent sends it: a system prompt (none, a string or text blocks), then
    user turns and assistant answers, tool rounds (thinking, parallel tool_use, the results in
    any order, sometimes with text after them), images, system messages among the turns, and
    cache marks anywhere."""
    ids = iter(range(10_000))
    words = lambda: "w " * draw(st.integers(1, 40))  # noqa: E731
    body: Body = {"model": "claude-test", "max_tokens": 64}
    system = draw(st.sampled_from(["none", "string", "blocks"]))
    if system == "string":
        body["system"] = "You are careful."
    elif system == "blocks":
        body["system"] = [
            maybe_marked(draw, {"type": "text", "text": f"rule {i}"})
            for i in range(draw(st.integers(1, 2)))
        ]
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            content: Any = "ask " + words()
        else:
            content = [maybe_marked(draw, {"type": "text", "text": "ask " + words()})]
            if draw(st.integers(0, 5)) == 0:
                image = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
                content.append({"type": "image", "source": image})
        messages.append({"role": "user", "content": content})
        for _ in range(draw(st.integers(0, 4))):  # tool rounds
            calls = [f"toolu_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            answer: list[dict[str, Any]] = []
            if draw(st.booleans()):
                n = next(ids)
                answer.append({"type": "thinking", "thinking": "hmm", "signature": f"sig{n}"})
            if draw(st.booleans()):
                answer.append({"type": "text", "text": "let me look"})
            answer += [
                maybe_marked(
                    draw, {"type": "tool_use", "id": c, "name": "run", "input": {"n": i, "x": [1]}}
                )
                for i, c in enumerate(calls)
            ]
            messages.append({"role": "assistant", "content": answer})
            results = [
                maybe_marked(
                    draw,
                    {
                        "type": "tool_result",
                        "tool_use_id": c,
                        "content": draw(
                            st.sampled_from(
                                ["out " + words(), [{"type": "text", "text": "out " + words()}]]
                            )
                        ),
                        **({"is_error": True} if draw(st.integers(0, 5)) == 0 else {}),
                    },
                )
                for c in draw(st.permutations(calls))
            ]
            if draw(st.integers(0, 4)) == 0:
                results.append({"type": "text", "text": "also: " + words()})
            messages.append({"role": "user", "content": results})
        ended_on_results = isinstance(messages[-1]["content"], list) and any(
            b["type"] == "tool_result" for b in messages[-1]["content"]
        )
        if draw(st.booleans()) or ended_on_results:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": words()}]})
    if messages[-1]["role"] == "assistant" and draw(st.booleans()):
        messages.append({"role": "user", "content": "next " + words()})
    body["messages"] = with_system_messages(draw, messages)
    return body


def with_system_messages(draw: st.DrawFn, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sometimes a ``role: "system"`` message where the API takes one (Claude Code's skills
    after the first turn, news after tool results): after a user turn, before an assistant
    turn or at the end; its content a string or text blocks."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        out.append(message)
        after = messages[i + 1] if i + 1 < len(messages) else None
        fits = message["role"] == "user" and (after is None or after["role"] == "assistant")
        if fits and draw(st.integers(0, 3)) == 0:
            content = f"instruction {i}: " + "w " * draw(st.integers(1, 30))
            if draw(st.booleans()):
                out.append({"role": "system", "content": content})
            else:
                block = maybe_marked(draw, {"type": "text", "text": content})
                out.append({"role": "system", "content": [block]})
    return out


def policies() -> st.SearchStrategy[PolicySettings]:
    keep = st.one_of(
        st.builds(KeepSettings, interactions=st.integers(1, 3)),
        st.builds(KeepSettings, tokens=st.integers(20, 400)),
        st.builds(KeepSettings, messages=st.integers(1, 6)),
    )
    clear = st.one_of(
        st.just(ClearToolResultsSettings()),
        st.builds(ClearToolResultsSettings, older_than_rounds=st.integers(1, 3)),
    )
    return st.builds(
        PolicySettings,
        strategy=st.sampled_from(["summarize", "trim", "neuralyze"]),
        mode=st.just("inline"),
        trigger=st.just(ALWAYS),
        keep=keep,
        clear_tool_results=clear,
        pin=st.sampled_from([(), ('role == "user"',)]),  # the coding-agent recipe pins prompts
    )


def planned(body: Body, policy: PolicySettings, counter: TokenCounter) -> Plan:
    _, current = plan_body(MESSAGES, body, policy, counter, model="claude-test")
    if current.summary_request is not None:
        current = current.with_summary("The agent ran tools.", checkpoint_id="cp")
    return current


def unmarked(value: Any) -> Any:
    """``value`` without cache marks, as this test reads them (independent of the adapter)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), policy=policies())
def test_every_rendered_body_is_a_valid_request(body: Body, policy: PolicySettings) -> None:
    counter = TokenCounter()
    original = copy.deepcopy(body)
    current = planned(body, policy, counter)
    rendered = MESSAGES.render(body, current)
    assert body == original  # the client's body is never mutated

    assert problems(rendered) == []  # pairs whole, first turn the user's, system messages placed
    # System messages inside messages are instructions: every one sent, verbatim, in order.
    in_messages = [m for m in original["messages"] if m["role"] == "system"]
    assert [m for m in rendered["messages"] if m["role"] == "system"] == in_messages
    summaries = summaries_in(rendered)
    assert len(summaries) <= 1
    client_system = system_texts(original)
    assert system_texts(rendered)[: len(client_system)] == client_system
    # The proxy marks at most what it injected, its last block, and never as a fifth mark.
    system = rendered.get("system")
    injected = system[len(client_system) :] if isinstance(system, list) else []
    marked = [i for i, b in enumerate(injected) if "cache_control" in b]
    assert marked in ([], [len(injected) - 1])
    if marked:
        assert len(cache_marks(rendered)) <= 4
    if isinstance(original.get("system"), list):
        assert rendered["system"][: len(original["system"])] == original["system"]  # marks too
    # Every sent message is one the client sent, but for a cleared result's content; the newest
    # turn is always verbatim (a system message sent again may follow it: its place after a cut).
    newest = [m for m in original["messages"] if m["role"] != "system"][-1]
    assert [m for m in rendered["messages"] if m["role"] != "system"][-1] == newest
    for message in rendered["messages"]:
        if message in original["messages"]:
            continue
        matches = [
            m
            for m in original["messages"]
            if m["role"] == message["role"] and len(m["content"]) == len(message["content"])
        ]
        assert any(same_but_stubs(m, message) for m in matches), message
    if not current.changed:
        assert wirejson.encode(rendered) == wirejson.encode(original)


def same_but_stubs(sent: dict[str, Any], rendered: dict[str, Any]) -> bool:
    for a, b in zip(sent["content"], rendered["content"], strict=True):
        if a == b:
            continue
        if a.get("type") != "tool_result" or {**a, "content": None} != {**b, "content": None}:
            return False
        if not str(b["content"]).startswith("[tool result cleared"):
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies())
def test_a_plan_with_no_cut_renders_the_same_bytes(body: Body) -> None:
    counter = TokenCounter()
    raw = wirejson.encode(body)
    current = planned(body, PolicySettings(trigger=NEVER, mode="inline"), counter)
    assert not current.changed
    assert wirejson.encode(MESSAGES.render(body, current)) == raw


# --- the rules, one by one ------------------------------------------------------------------------


def round_trip() -> Body:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "rules", "cache_control": MARK}],
        "messages": [
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {"p": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A " * 300},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": "B " * 300}],
                        "is_error": True,
                        "cache_control": MARK,
                    },
                    {"type": "text", "text": "keep going"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "read both"}]},
            {"role": "user", "content": "next"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "last"},
        ],
    }


def test_the_neutral_model(counter: TokenCounter) -> None:
    body = round_trip()
    messages = MESSAGES.conversation(body).messages
    roles = [m["role"] for m in messages]
    # The results and the text after them are tool results: one user turn fewer than on the wire.
    assert roles == [
        *("system", "user", "assistant", "tool", "tool"),
        *("assistant", "user", "assistant", "user"),
    ]
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["t1", "t2"]
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == {"p": "a"}
    assert [m["tool_call_id"] for m in messages[3:5]] == ["t1", "t2"]
    assert messages[3]["_wire"] is messages[4]["_wire"]
    assert "keep going" in json.dumps(messages[4]["content"])
    assert MESSAGES.conversation(body).tools is None


def test_moving_cache_marks_keep_the_hash_and_anything_else_changes_it(
    counter: TokenCounter,
) -> None:
    body = round_trip()
    base = chain_hash(MESSAGES.conversation(body).messages)
    moved = copy.deepcopy(body)
    del moved["system"][0]["cache_control"]
    del moved["messages"][2]["content"][1]["cache_control"]
    moved["messages"][1]["content"][1]["cache_control"] = MARK
    moved["messages"][2]["content"][2]["cache_control"] = MARK
    assert chain_hash(MESSAGES.conversation(moved).messages) == base
    for change in (
        lambda b: b["messages"][1]["content"][0].update(signature="sig-2"),
        lambda b: b["messages"][2]["content"][1].update(is_error=False),
        lambda b: b["messages"][1]["content"][1]["input"].update(p="z"),
        lambda b: b["system"][0].update(text="other rules"),
    ):
        changed = copy.deepcopy(body)
        change(changed)
        assert chain_hash(MESSAGES.conversation(changed).messages) != base


def test_a_summary_goes_into_system_and_cleared_results_keep_their_block(
    counter: TokenCounter,
) -> None:
    body = round_trip()
    policy = PolicySettings(
        trigger=ALWAYS,
        mode="inline",
        keep=KeepSettings(interactions=1),
        clear_tool_results=ClearToolResultsSettings(older_than_interactions=1),
    )
    trimmed = planned(body, policy.model_copy(update={"strategy": "trim"}), counter)
    rendered = MESSAGES.render(body, trimmed)
    assert rendered["messages"] == body["messages"][-1:]
    assert rendered["system"] == body["system"]  # nothing injected by trim

    keep_two = policy.model_copy(update={"keep": KeepSettings(interactions=3)})
    cleared = MESSAGES.render(body, planned(body, keep_two, counter))
    results = cleared["messages"][2]["content"]
    assert results[0]["content"].startswith("[tool result cleared")
    assert results[1]["content"].startswith("[tool result cleared")
    assert results[1]["is_error"] is True and results[1]["cache_control"] == MARK
    assert results[2] == {"type": "text", "text": "keep going"}
    assert cleared["messages"][1] == body["messages"][1]  # thinking and calls untouched


def test_a_string_system_stays_whole_and_an_echoed_summary_is_dropped(
    counter: TokenCounter,
) -> None:
    body = round_trip()
    body["system"] = "plain rules"
    policy = PolicySettings(trigger=ALWAYS, mode="inline", keep=KeepSettings(interactions=1))
    rendered = MESSAGES.render(body, planned(body, policy, counter))
    assert rendered["system"][0] == {"type": "text", "text": "plain rules"}
    assert len(rendered["system"]) == 2 and summaries_in(rendered)

    # The client echoes the summary block back: it is never stacked under a new one.
    echoed = copy.deepcopy(body)
    echoed["system"] = rendered["system"]
    again = MESSAGES.render(echoed, planned(echoed, policy, counter))
    assert len(summaries_in(again)) == 1
    quiet = MESSAGES.render(echoed, planned(echoed, PolicySettings(trigger=NEVER), counter))
    assert quiet["system"] == [{"type": "text", "text": "plain rules"}]
    assert quiet["messages"] == body["messages"]


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b"[]", "JSON object"),
        (b'{"messages": []}', "messages"),
        (b'{"messages": [{"role": "tool", "content": "x"}]}', "messages.0.role"),
        (b'{"messages": [{"role": "user", "content": 3}]}', "messages.0.content"),
        (b'{"messages": [{"role": "user", "content": [{"text": "x"}]}]}', "messages.0.content.0"),
        (
            b'{"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}',
            "tool_use_id",
        ),
        (
            b'{"system": [{"type": "image"}], "messages": [{"role": "user", "content": "x"}]}',
            "system.0",
        ),
        (b'{"model": 1, "messages": [{"role": "user", "content": "x"}]}', "model"),
    ],
)
def test_bad_bodies_are_refused(raw: bytes, where: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        MESSAGES.parse(raw)
    assert where in caught.value.message


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (InvalidRequest("bad"), "invalid_request_error"),
        (PayloadTooLarge("big"), "request_too_large"),
        (UpstreamUnavailable("down"), "api_error"),
        (UpstreamTimeout("slow"), "timeout_error"),
    ],
)
def test_errors_are_in_anthropics_shape(error: Exception, kind: str) -> None:
    body = json.loads(MESSAGES.error_body(error))  # type: ignore[arg-type]
    assert body == {"type": "error", "error": {"type": kind, "message": error.message}}  # type: ignore[attr-defined]


def targets_with(**upstream: Any) -> tuple[OpenAITarget, AnthropicTarget]:
    settings = parse_settings("", environ={})
    return targets(settings.upstream.model_copy(update=upstream), own_headers=frozenset())


def test_the_proxys_key_replaces_the_callers() -> None:
    headers = [
        (b"x-api-key", b"sk-caller"),
        (b"authorization", b"Bearer sk-caller"),
        (b"anthropic-version", b"2023-06-01"),
    ]
    _, anthropic = targets_with()
    kept = anthropic.headers(HeaderView.of(headers))
    assert kept == headers
    _, anthropic = targets_with(anthropic_api_key=SecretStr("sk-proxy"))
    replaced = anthropic.headers(HeaderView.of(headers))
    assert replaced == [(b"anthropic-version", b"2023-06-01"), (b"x-api-key", b"sk-proxy")]


def test_the_callers_key_reaches_the_summarizer_only_on_the_same_host() -> None:
    caller = HeaderView.of([(b"x-api-key", b"sk-caller"), (b"anthropic-version", b"2023-06-01")])
    _, elsewhere = targets_with(base_url="https://api.openai.com/v1")
    assert elsewhere.caller_credentials(caller) == {}
    _, gateway = targets_with(
        base_url="https://gateway.example/v1", anthropic_base_url="https://gateway.example"
    )
    assert gateway.caller_credentials(caller) == {"x-api-key": "sk-caller"}


def test_a_request_carrying_anthropic_version_is_anthropics_on_openais_routes_too() -> None:
    """An Anthropic key never goes to the OpenAI-compatible upstream, whatever the
    path; ``x-api-key`` alone is a gateway's credential and stays with the route's API."""
    openai, _ = targets_with(
        base_url="https://api.openai.com/v1",
        api_key=SecretStr("sk-openai-proxy"),
        anthropic_api_key=SecretStr("sk-ant-proxy"),
    )
    anthropic = HeaderView.of(
        [(b"anthropic-version", b"2023-06-01"), (b"x-api-key", b"sk-ant-caller")]
    )
    scope = {"path": "/v1/chat/completions", "query_string": b"", "headers": anthropic.raw}
    target = openai.resolve(anthropic)
    assert target.url(scope) == "https://api.anthropic.com/v1/chat/completions"
    sent = target.headers(anthropic)
    assert sent == [(b"anthropic-version", b"2023-06-01"), (b"x-api-key", b"sk-ant-proxy")]
    assert target.caller_credentials(anthropic) == {}

    gateway = HeaderView.of([(b"x-api-key", b"gw-key")])
    scope = {**scope, "headers": gateway.raw}
    target = openai.resolve(gateway)
    assert target.url(scope) == "https://api.openai.com/v1/chat/completions"
    assert target.caller_credentials(gateway) == {"x-api-key": "gw-key"}
