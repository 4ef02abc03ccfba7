"""A conversation's books after an answer (proxy.compaction.money.spending and books): the
ledger, the pace and the timeline written together, once, after the provider answered; what the
store holds then, for a request answered with usage, one answered without, and one never
answered."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.compaction.compactor import Compactor
from proxy.compaction.decision import Decision, Incoming
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.windows import ModelWindows
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.background import BackgroundQueue
from proxy.config.settings import parse_settings
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_completions import CHAT
from proxy.economics.prices import PriceTable
from proxy.events import Listeners
from proxy.state.conversations import Store
from proxy.state.store.memory import MemoryBackend
from proxy.state.tenancy import Tenancy
from proxy.types import HeaderView
from tests.compaction.test_decide import Body, FixedSummary, chat

CONFIG = """
policies:
  default: {strategy: summarize, mode: ahead, trigger: {messages: 40}, keep: {interactions: 2}}
pricing:
  models: {"gpt-4o": {input: 2.0, cached_input: 0.5, output: 8.0}}
"""
NOW = 5_000.0
ANSWER = (
    b'{"usage": {"prompt_tokens": 900, "completion_tokens": 10,'
    b' "prompt_tokens_details": {"cached_tokens": 512}}}'
)


class CountingBackend(MemoryBackend):
    """A memory backend that counts the compare-and-set writes of each key."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes, *, ttl_ms: int
    ) -> bool:
        self.writes[key] = self.writes.get(key, 0) + 1
        return await super().compare_and_set(key, expected, value, ttl_ms=ttl_ms)


def made() -> tuple[Compactor, Store, CountingBackend]:
    settings = parse_settings(CONFIG, environ={})
    backend = CountingBackend()
    store = Store(backend, settings=settings.store, tenancy=Tenancy.from_settings(settings.store))
    compactor = Compactor(
        CompactionSettings.of(settings),
        store=store,
        counter=TokenCounter(settings.model_table()),
        summarizer_for=lambda caller, own=None: FixedSummary(),
        background=BackgroundQueue(max_queue=4, concurrency=1),
        windows=ModelWindows(settings.models, settings.upstream),
        calibration=Calibration(settings.calibration),
        listeners=Listeners(),
        prices=PriceTable(settings.pricing),
        clock=lambda: NOW,
    )
    return compactor, store, backend


async def request(compactor: Compactor) -> Decision:
    view = HeaderView.of([(b"x-conversation-id", b"c1")])
    return await compactor.decide(Incoming(view, Body(chat(3)), CHAT, {}, False))


async def entry_of(store: Store) -> dict[str, Any] | None:
    return await store.ledgers.inspect(store.tenancy.tenant(None), "c1")


def tokens_before(decision: Decision) -> int:
    return int(dict(decision.response_headers)[b"x-compaction-tokens-before"])


def test_an_answer_writes_the_ledger_the_pace_and_the_timeline_once(
    tiktoken_files: object,
) -> None:
    async def run() -> tuple[dict[str, Any] | None, dict[str, Any] | None, int, int]:
        compactor, store, backend = made()
        decision = await request(compactor)
        await compactor.join()
        before = await entry_of(store)  # nothing written while the request is under way
        assert decision.follow_up is not None
        decision.follow_up.observe(200, [], ANSWER)
        decision.follow_up.answered()
        await compactor.join()
        key = store.tenancy.ledger_key(store.tenancy.tenant(None), "c1")
        return before, await entry_of(store), backend.writes.get(key, 0), tokens_before(decision)

    before, entry, writes, full = asyncio.run(run())
    assert before is None
    assert writes == 1
    assert entry is not None
    spent = ((900 - 512) * 2.0 + 512 * 0.5 + 10 * 8.0) / 1e6
    assert entry["requests"] == 1
    assert (entry["prompt_tokens"], entry["cached_tokens"], entry["output_tokens"]) == (
        900,
        512,
        10,
    )
    assert entry["spent"] == entry["counterfactual"] == spent  # sent as the client sent it
    assert (entry["at"], entry["model"]) == (NOW, "gpt-4o")
    assert entry["pace"] == {
        "tokens": full,
        "samples": 0,
        "growth": 0.0,
        "unapplied": None,
        "unapplied_count": 0,
        "policy": "default",
        "at": NOW,
    }
    assert entry["turns"] == [[NOW, 7, full, full, 900, 512, None]]


def test_an_answer_without_usage_writes_the_pace_alone(tiktoken_files: object) -> None:
    async def run() -> dict[str, Any] | None:
        compactor, store, _ = made()
        decision = await request(compactor)
        assert decision.follow_up is not None
        decision.follow_up.observe(200, [], b'{"choices": []}')
        decision.follow_up.answered()  # heard once: no second sample
        await compactor.join()
        return await entry_of(store)

    entry = asyncio.run(run())
    assert entry is not None
    assert set(entry) == {"pace"}  # no ledger, no timeline point: nothing was billed
    assert entry["pace"]["at"] == NOW


def test_a_request_never_answered_leaves_no_books(tiktoken_files: object) -> None:
    async def run() -> dict[str, Any] | None:
        compactor, store, _ = made()
        await request(compactor)
        await compactor.join()
        return await entry_of(store)

    assert asyncio.run(run()) is None


def test_an_answer_heard_only_as_answered_still_writes_the_pace(tiktoken_files: object) -> None:
    """After recall rounds the final answer is priced by the rounds' follow-up, and this one is
    only told it was answered: the request's pace sample is written all the same, once."""

    async def run() -> tuple[dict[str, Any] | None, int]:
        compactor, store, backend = made()
        decision = await request(compactor)
        assert decision.follow_up is not None
        decision.follow_up.answered()
        decision.follow_up.answered()
        await compactor.join()
        key = store.tenancy.ledger_key(store.tenancy.tenant(None), "c1")
        return await entry_of(store), backend.writes.get(key, 0)

    entry, writes = asyncio.run(run())
    assert entry is not None and set(entry) == {"pace"}
    assert writes == 1
