"""A conversation's messages lose the summaries a client echoed back (``Conversations.build``),
and a followed body's history the last one was found not to hold any of is not looked at again:
whatever was carried, what is stripped is what a fresh look strips."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.compaction.conversation import Conversations
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.model_info import ModelInfos
from proxy.compaction.models.windows import ModelWindows
from proxy.core import resent
from proxy.core.facts import FactCache
from proxy.core.interactions import strip_agent_summaries
from proxy.core.policy import PolicySettings
from proxy.core.summary_message import render_summary_message
from proxy.dialects.chat_completions import CHAT
from proxy.state.opening import open_store
from tests.support.config import config

OWN = "Notes so far: {summary}"
POLICY = {"strategy": "summarize", "trigger": {"messages": 1000}}
SETTINGS = config(
    store={"url": "memory://", "tenant_secret": "echoed-summaries-tenant-secret-0123456789"},
    policies={"default": POLICY, "own": {**POLICY, "summarizer": {"final_prompt": OWN}}},
)


@pytest.fixture(autouse=True)
def follow_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """These bodies are small, and followed all the same."""
    monkeypatch.setattr(resent, "FOLLOW_BYTES", 0)


class Reading:
    """Bodies of one conversation read as the Reader reads them, each after the last."""

    def __init__(self) -> None:
        store = open_store(SETTINGS.store)
        calibration = Calibration(SETTINGS.calibration)
        windows = ModelWindows(SETTINGS.models, SETTINGS.upstream)
        self.facts = FactCache()
        self.conversations = Conversations(
            tenancy=store.tenancy,
            calibration=calibration,
            models=ModelInfos(windows, calibration),
            facts=self.facts,
        )
        self.last: resent.ParsedBody | None = None

    def messages(self, history: list[dict[str, Any]], policy: str = "default") -> list[Any]:
        parsed = CHAT.parse(orjson.dumps({"model": "m", "messages": history}), self.last, True)
        self.last = parsed
        settings: PolicySettings = SETTINGS.policies[policy]
        with self.facts.request() as facts:
            neutral = CHAT.conversation(parsed.value, facts=facts, parsed=parsed)
            conv = self.conversations.build(
                "t", "c", parsed.value, neutral, policy, settings, credentials=None, facts=facts
            )
        fresh = strip_agent_summaries(history, final_prompt=settings.summarizer.final_prompt)
        assert conv.messages == fresh
        return conv.messages


def _turns(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i}"}
        for i in range(start, start + n)
    ]


def test_a_summary_echoed_in_the_new_messages_is_stripped() -> None:
    reading = Reading()
    history = [{"role": "system", "content": "s"}, *_turns(20)]
    assert reading.messages(history) == history
    assert reading.last is not None and reading.last.plain_for(None) == len(history)
    echoed = [*history, render_summary_message("what came before"), *_turns(2, 20)]
    assert reading.messages(echoed) == [*history, *_turns(2, 20)]
    assert reading.last.reused == len(history)


def test_a_history_found_clean_with_one_frame_is_looked_at_again_with_another() -> None:
    """A summary framed as policy ``own`` frames it is the client's own text to the default
    policy, and ours to ``own``."""
    reading = Reading()
    theirs = render_summary_message("what came before", final_prompt=OWN)
    history = [{"role": "system", "content": "s"}, theirs, *_turns(20)]
    assert reading.messages(history) == history
    grown = [*history, *_turns(2, 20)]
    assert theirs not in reading.messages(grown, policy="own")
    assert reading.last is not None and reading.last.reused == len(history)


def test_an_earlier_message_replaced_by_a_summary_is_stripped() -> None:
    reading = Reading()
    history = [{"role": "system", "content": "s"}, *_turns(20)]
    reading.messages(history)
    edited = [*history[:5], render_summary_message("earlier"), *history[6:], *_turns(1, 20)]
    assert len(reading.messages(edited)) == len(edited) - 1
