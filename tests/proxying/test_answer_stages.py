"""What is done with a provider's answer is an ordered list of stages the decision carries
(``Decision.stages``), each built only for a request whose plan needs it: the native report
under ``strategy: native``, the overflow rescue for a request the proxy can compact harder, the
recall rounds for a request that went out with the recall tool. A plain request builds neither
the native nor the recall stage, its rescue looks at no successful answer, and it enters none of
the stages' modules."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from proxy import wirejson
from proxy.compaction.decision import AnswerStages, Decision, Incoming
from proxy.config.settings import parse_settings
from proxy.dialects.chat_completions import CHAT
from proxy.dialects.responses import RESPONSES
from proxy.events import Listeners
from proxy.proxying.native_retry import NativeStage
from proxy.proxying.overflow import OverflowRescue
from proxy.proxying.recall.loop import RecallStage
from proxy.proxying.routes import CompactedRoute, Resources
from proxy.types import HeaderView
from tests.bench.trace_request import REPO, trace
from tests.compaction.test_decide import Body, compactor
from tests.support.mock_upstream import MockUpstream
from tests.support.servers import ThreadedUvicorn

CONVERSATION = {"x-conversation-id": "stages-1"}
CLEARING = """
policies:
  default: {strategy: summarize, trigger: {context_fraction: 0, interactions: 100},
            keep: {interactions: 1}, clear_tool_results: {older_than_interactions: 1}}
"""
NATIVE = """
policies:
  default: {strategy: native, trigger: {input_tokens: 50, context_fraction: 0},
            keep: {interactions: 1}}
"""


@dataclass(frozen=True)
class Built:
    """A stage as the route would build it, named by its kind."""

    kind: str
    of: object


KIT = AnswerStages(
    native=partial(Built, "native"),  # type: ignore[arg-type]
    rescue=partial(Built, "rescue"),  # type: ignore[arg-type]
    recall=partial(Built, "recall"),  # type: ignore[arg-type]
)


def decide(yaml_text: str, body: dict[str, Any], dialect: Any = CHAT, **headers: str) -> Decision:
    made, _ = compactor(yaml_text, Listeners())
    view = HeaderView.of([(k.encode(), v.encode()) for k, v in headers.items()])
    raw = wirejson.encode(body)
    return asyncio.run(made.decide(Incoming(view, Body(raw), dialect, {}, False, stages=KIT)))


def kinds(decision: Decision) -> list[str]:
    return [stage.kind for stage in decision.stages]  # type: ignore[attr-defined]


def test_a_plain_request_builds_no_native_or_recall_stage(tiktoken_files: object) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    decision = decide("", body, **CONVERSATION)
    # Any prompt may overflow: the rescue is there, and looks only at an answer that can say so.
    assert kinds(decision) == ["rescue"]
    assert 200 not in OverflowRescue.statuses
    # A request compaction leaves alone gets no stage at all.
    assert decide("", body).stages == ()


@pytest.fixture(scope="module")
def plain_trace(tiktoken_cache_dir: object) -> set[str]:
    """The proxy's modules a plain chat completion (a conversation id, no summary due) enters."""
    with ThreadedUvicorn(MockUpstream()) as provider:
        found = asyncio.run(trace(provider.url, REPO))
    assert "proxy/proxying/forward.py" in found.entered  # the request was traced
    return found.entered


def test_a_plain_request_enters_none_of_the_stages_modules(plain_trace: set[str]) -> None:
    stages = (
        "proxy/proxying/native_retry.py",
        "proxy/proxying/overflow.py",
        "proxy/proxying/recall/",
        "proxy/compaction/native/",
        "proxy/compaction/recall/",
    )
    assert sorted(m for m in plain_trace if m.startswith(stages)) == []


def test_a_plain_request_enters_nothing_it_does_not_ask_for(plain_trace: set[str]) -> None:
    unasked = (
        "proxy/compaction/summaries/focus.py",  # no X-Compaction-Focus
        "proxy/compaction/summaries/pinning.py",  # no X-Compaction-Checkpoint
        "proxy/compaction/money/paying.py",  # a prompt the price trigger does not weigh
        "proxy/compaction/summaries/stored.py",  # nothing stored, nothing pinned: none applies
        "proxy/core/keep.py",  # no summary near: no cut to place
        "proxy/state/listing.py",  # moved in the listing a moment ago (the warm-up request)
        "proxy/compaction/agents/",  # a route no agent compacts on
        "proxy/compaction/compactor.py",  # the route calls the rewriter straight
        "proxy/compaction/settings.py",  # configuration, read as attributes
        "proxy/config/",  # the settings, read as attributes
        "proxy/compaction/offload.py",  # a small body
        "proxy/core/pins.py",  # nothing pinned
        "proxy/core/clearing.py",  # no clear_tool_results
        "proxy/core/headroom.py",  # no summary near
        "proxy/ops/hooks.py",  # no before_send hook
        "proxy/proxying/resend.py",  # no summary asked of the provider
        "proxy/server/abort.py",  # a response not cut off
        "proxy/state/sealing.py",  # no encryption keys: values kept as they are
        "proxy/state/store/breaker.py",  # an in-process store (memory://) never fails
        "proxy/tracing.py",  # no tracer installed
    )
    assert sorted(m for m in plain_trace if m.startswith(unasked)) == []


def test_the_recall_stage_is_built_when_the_plan_sends_stubs(tiktoken_files: object) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "line of output " * 600},
        {"role": "assistant", "content": "found"},
        {"role": "user", "content": "and now?"},
    ]
    decision = decide(CLEARING, {"model": "gpt-4o", "messages": messages}, **CONVERSATION)
    assert kinds(decision) == ["rescue", "recall"]
    assert b"recall" in (decision.body or b"")  # the tool the rounds answer went out


def test_the_native_stage_is_built_under_strategy_native(tiktoken_files: object) -> None:
    body = {"model": "gpt-4o", "input": [{"role": "user", "content": "hello " * 100}]}
    decision = decide(NATIVE, body, RESPONSES, **CONVERSATION)
    assert kinds(decision) == ["native", "rescue"]  # the rescue: from the shadow summary
    # The provider holds the history: nothing to rescue from, the report alone.
    held = {**body, "previous_response_id": "resp_1"}
    assert kinds(decide(NATIVE, held, RESPONSES, **CONVERSATION)) == ["native"]


def test_the_route_builds_each_kind_from_its_module() -> None:
    settings = parse_settings("", environ={})
    made, _ = compactor("", Listeners())
    resources = Resources(settings.server, settings.upstream, made, Listeners())
    route = CompactedRoute(resources, CHAT, None)  # type: ignore[arg-type]
    follow_up: Any = object()
    assert isinstance(route.stages.native(follow_up), NativeStage)
    assert isinstance(route.stages.recall(follow_up), RecallStage)
    rescue = route.stages.rescue(follow_up)
    assert isinstance(rescue, OverflowRescue)
    assert rescue.hold_seconds == settings.upstream.stream_hold_seconds
