"""The crossing between the route and compaction, in process: one ``Compactor.decide`` per
request, and a follow-up with named steps (observe, replacement, answered) instead of callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from proxy import wirejson
from proxy.compaction.compactor import Compactor
from proxy.compaction.decision import Decision, Incoming
from proxy.compaction.events import CompactionDecided, OverflowRetry, SummaryStored
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.windows import ModelWindows
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.background import BackgroundQueue
from proxy.config.settings import parse_settings
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_completions import CHAT
from proxy.economics.prices import PriceTable
from proxy.events import Listeners
from proxy.state.opening import open_store
from proxy.types import HeaderView

NEURALYZE = """
policies:
  default: {strategy: neuralyze, trigger: {messages: 4}, keep: {interactions: 2}}
"""
AHEAD = """
policies:
  default: {strategy: summarize, mode: ahead, soft_fraction: 0.5, trigger: {messages: 12},
            keep: {interactions: 1}}
"""


class Body:
    """A body source that counts its reads."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.reads = 0

    async def read(self) -> bytes:
        self.reads += 1
        return self.raw


class FixedSummary:
    async def summarize(
        self, transcript: Sequence[dict[str, Any]], *, previous: str | None, model: str, **_: Any
    ) -> str:
        return "SUMMARY of the early turns"


class Heard:
    """Every event of the given types, in order."""

    def __init__(self, listeners: Listeners, *types: type) -> None:
        self.events: list[Any] = []
        for kind in types:
            listeners.subscribe(kind, self.events.append)


def compactor(
    yaml_text: str, listeners: Listeners, **parts: Any
) -> tuple[Compactor, BackgroundQueue]:
    """A Compactor of ``yaml_text``'s settings, priced as its ``pricing:`` says; ``parts``
    replace others (``clock``)."""
    settings = parse_settings(yaml_text, environ={})
    background = BackgroundQueue(max_queue=4, concurrency=1)
    made = Compactor(
        CompactionSettings.of(settings),
        store=open_store(settings.store),
        counter=TokenCounter(settings.model_table()),
        summarizer_for=lambda caller, own=None: FixedSummary(),
        background=background,
        windows=ModelWindows(settings.models, settings.upstream),
        calibration=Calibration(settings.calibration),
        listeners=listeners,
        prices=PriceTable(settings.pricing),
        **parts,
    )
    return made, background


def incoming(raw: bytes, *, streamable: bool, **headers: str) -> tuple[Incoming, Body]:
    view = HeaderView.of([(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()])
    body = Body(raw)
    return Incoming(view, body, CHAT, {}, streamable), body


def chat(interactions: int) -> bytes:
    messages = [{"role": "system", "content": "You help."}]
    for i in range(interactions):
        messages += [
            {"role": "user", "content": f"question {i}: " + "why " * 40},
            {"role": "assistant", "content": f"answer {i}: " + "because " * 40},
        ]
    return wirejson.encode({"model": "gpt-4o", "messages": messages})


def outcome(decision: Decision) -> bytes:
    return dict(decision.response_headers)[b"x-compaction"]


@pytest.mark.parametrize("streamable", [True, False])
def test_headers_alone_decide_and_a_streamable_body_is_never_read(
    tiktoken_files: object, streamable: bool
) -> None:
    listeners = Listeners()
    heard = Heard(listeners, CompactionDecided)
    made, _ = compactor(NEURALYZE, listeners)
    request, body = incoming(b"{not json", streamable=streamable, x_compaction="off")
    decision = asyncio.run(made.decide(request))
    assert decision.response_headers == [(b"x-compaction", b"off")]
    assert decision.follow_up is None
    assert (decision.body, body.reads) == ((None, 0) if streamable else (b"{not json", 1))
    assert heard.events == [CompactionDecided("off", "off")]


def test_an_overflow_is_learned_then_replaced_once(tiktoken_files: object) -> None:
    listeners = Listeners()
    heard = Heard(listeners, CompactionDecided, OverflowRetry)
    made, _ = compactor(NEURALYZE, listeners)
    request, body = incoming(chat(6), streamable=True, x_conversation_id="c1")

    async def go() -> tuple[Decision, Decision | None, Decision | None]:
        decision = await made.decide(request)
        assert decision.follow_up is not None
        overflow = b'{"error": {"message": "maximum context length is 200 tokens"}}'
        decision.follow_up.observe(400, [], overflow)
        first = await decision.follow_up.replacement()
        return decision, first, await decision.follow_up.replacement()

    decision, replaced, again = asyncio.run(go())
    assert body.reads == 1
    assert outcome(decision) == b"applied"
    assert replaced is not None and again is None  # one retry, never two
    headers = dict(replaced.response_headers)
    assert headers[b"x-compaction-retried"] == b"context_length_exceeded"
    assert int(headers[b"x-compaction-tokens-after"]) < int(
        dict(decision.response_headers)[b"x-compaction-tokens-after"]
    )
    assert len(wirejson.parse(replaced.body or b"")["messages"]) < len(
        wirejson.parse(decision.body or b"")["messages"]
    )
    assert [e.outcome for e in heard.events] == ["applied", "retried", "applied"]
    assert isinstance(heard.events[1], OverflowRetry)


def test_a_summary_due_ahead_of_time_is_queued_only_once_answered(tiktoken_files: object) -> None:
    listeners = Listeners()
    heard = Heard(listeners, SummaryStored)
    made, background = compactor(AHEAD, listeners)
    request, _ = incoming(chat(3), streamable=False, x_conversation_id="c2")

    async def go() -> tuple[Decision, int]:
        decision = await made.decide(request)
        assert decision.follow_up is not None
        await asyncio.sleep(0)
        queued_before = background.depth
        decision.follow_up.answered()
        await background.join()
        return decision, queued_before

    decision, queued_before = asyncio.run(go())
    assert outcome(decision) == b"skipped"  # near its trigger: made after the answer
    assert queued_before == 0
    assert [e.conversation_id for e in heard.events] == ["c2"]
    assert heard.events[0].checkpoint.summary == "SUMMARY of the early turns"
