"""A conversation's history sent again is planned once while what its plan is made from stays the
same (``proxy.compaction.reading.LastPlans``), and planned again as soon as any of it changes:
the stored record, the policy, the model, the tools, the model's window. Each test sends a body
big enough to be followed (its messages are then the last body's very objects), checks that the
plan was taken again, then changes one input and checks the decision is a fresh plan's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy import wirejson
from proxy.compaction import reading
from proxy.compaction.compactor import Compactor
from proxy.compaction.decision import Decision
from proxy.compaction.reading import LastPlans
from proxy.compaction.recall import tool
from proxy.core.checkpoints import Checkpoint
from proxy.core.resent import FOLLOW_BYTES
from proxy.events import Listeners
from proxy.state.tenancy import credential_from_headers
from tests.compaction.test_decide import compactor, incoming

SETTINGS = """
store: {url: "memory://", tenant_secret: "last-plans-tenant-secret-0123456789"}
policies:
  default: {strategy: summarize, mode: ahead, trigger: {messages: 1000}, keep: {interactions: 1}}
  dropping: {strategy: neuralyze, trigger: {messages: 4}, keep: {interactions: 1}}
"""
KEY = "sk-last-plans"


def history(interactions: int = 30) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help."}]
    for i in range(interactions):
        messages += [
            {"role": "user", "content": f"question {i}: " + "why " * 80},
            {"role": "assistant", "content": f"answer {i}: " + "because " * 80},
        ]
    return messages


def body(messages: list[dict[str, Any]], *, model: str = "gpt-4o", **after: Any) -> bytes:
    """A chat body whose fields after the history (``after``) may change between requests: the
    history stays the part a followed body takes as it was."""
    raw = wirejson.encode({"messages": messages, "model": model, **after})
    assert len(raw) >= FOLLOW_BYTES
    return raw


class Planning:
    """A compactor of ``SETTINGS``, and the plans its reader made (not taken again)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        self.compactor, _ = compactor(SETTINGS, Listeners())
        planned = reading.plan_with

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.made += 1
            return planned(*args, **kwargs)

        monkeypatch.setattr(reading, "plan_with", counted)


@pytest.fixture
def planning(tiktoken_files: object, monkeypatch: pytest.MonkeyPatch) -> Planning:
    return Planning(monkeypatch)


def decide(made: Compactor, raw: bytes, **headers: str) -> Decision:
    request, _ = incoming(
        raw, streamable=False, x_conversation_id="c-last", authorization=f"Bearer {KEY}", **headers
    )
    return asyncio.run(made.decide(request))


def sent(decision: Decision) -> tuple[bytes | None, dict[bytes, bytes]]:
    """The body and headers (but the id of a checkpoint made for it, new each time)."""
    headers = dict(decision.response_headers)
    if decision.body is not None and b"SUMMARY" in decision.body:
        headers.pop(b"x-compaction-checkpoint", None)
    return decision.body, headers


def fresh(raw: bytes, *, made: Compactor | None = None, **headers: str) -> Decision:
    """The decision of a compactor that never planned this history (its record copied)."""
    return decide(made or compactor(SETTINGS, Listeners())[0], raw, **headers)


def test_the_same_history_again_is_planned_once_and_decided_alike(planning: Planning) -> None:
    made = planning.compactor
    messages = history()
    first = decide(made, body(messages))
    again = decide(made, body(messages))
    assert planning.made == 1
    assert sent(again) == sent(first) == sent(fresh(body(messages)))
    # Nothing changed: the client's own bytes go out (after the cache key), as for a fresh plan.
    assert sent(again)[1][b"x-compaction"] == b"skipped"
    assert (again.body or b"").endswith(body(messages)[1:])


def test_a_new_checkpoint_in_the_record_is_planned(planning: Planning) -> None:
    made = planning.compactor
    messages = history()
    raw = body(messages)
    assert sent(decide(made, raw))[1][b"x-compaction"] == b"skipped"
    store = made._store
    caller = {"authorization": f"Bearer {KEY}"}
    tenant = store.tenancy.tenant(credential_from_headers(caller, made.settings.conversation))
    checkpoint = Checkpoint.create(messages, covered=41, summary="SUMMARY of the early turns")
    assert asyncio.run(store.add_checkpoint(tenant, "c-last", checkpoint))
    applied = decide(made, raw)
    assert planning.made == 2
    assert sent(applied)[1][b"x-compaction"] == b"applied"
    assert b"SUMMARY of the early turns" in (applied.body or b"")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"headers": {"x_compaction_policy": "dropping"}}, id="policy"),
        pytest.param({"model": "gpt-4"}, id="model"),  # another window
        # No window known for either: only the encoding (the counts) differs.
        pytest.param({"model": "davinci-002", "was": "mystery-model"}, id="encoding"),
        pytest.param(
            {"after": {"tools": [{"type": "function", "function": {"name": "t" * 400}}]}},
            id="tools",
        ),
    ],
)
def test_another_policy_model_or_tools_with_the_same_history_is_planned(
    planning: Planning, change: dict[str, Any]
) -> None:
    made = planning.compactor
    messages = history()
    before = sent(decide(made, body(messages, model=change.get("was", "gpt-4o"))))
    raw = body(messages, model=change.get("model", "gpt-4o"), **change.get("after", {}))
    headers = change.get("headers", {})
    changed = decide(made, raw, **headers)
    assert planning.made == 2
    assert sent(changed) == sent(fresh(raw, **headers)) != before


def overflowed(made: Compactor, decision: Decision) -> None:
    """The provider answered ``decision`` that its window is 2000 tokens."""
    overflow = b'{"error": {"message": "maximum context length is 2000 tokens"}}'

    async def answer() -> None:
        assert decision.follow_up is not None
        decision.follow_up.observe(400, [], overflow)
        await made.join()

    asyncio.run(answer())


def test_an_edited_message_is_planned(planning: Planning) -> None:
    made = planning.compactor
    messages = history()
    before = sent(decide(made, body(messages)))
    edited = [*messages[:-1], {"role": "assistant", "content": "answer: " + "so " * 900}]
    changed = decide(made, body(edited))
    assert planning.made == 2
    assert sent(changed) == sent(fresh(body(edited))) != before


def test_a_window_learned_from_an_overflow_is_planned_with(planning: Planning) -> None:
    made = planning.compactor
    raw = body(history())
    first = decide(made, raw)
    overflowed(made, first)
    learned = decide(made, raw)
    assert planning.made == 2
    other, _ = compactor(SETTINGS, Listeners())
    overflowed(other, fresh(raw, made=other))
    assert sent(learned) == sent(fresh(raw, made=other)) != sent(first)


def test_last_plans_are_bounded_by_conversations_and_messages(
    planning: Planning, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = planning.compactor
    kept = LastPlans(max_plans=1)
    monkeypatch.setattr(made._rewriter._reader, "_last_plans", kept)
    messages = history()

    def named(conversation: str) -> None:
        request, _ = incoming(body(messages), streamable=False, x_conversation_id=conversation)
        asyncio.run(made.decide(request))

    named("a")
    named("b")  # drops a's
    named("a")
    assert planning.made == 3
    named("a")
    assert planning.made == 3
    kept.max_messages = len(messages) - 1  # a history past the bound is not kept
    named("b")
    named("b")
    assert planning.made == 5


class Annotating:
    """Counts the plans recall annotated (not taken again)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        annotate = tool.annotate

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.made += 1
            return annotate(*args, **kwargs)

        monkeypatch.setattr(tool, "annotate", counted)


def summarized(made: Compactor, messages: list[dict[str, Any]], conversation: str) -> None:
    """A checkpoint of ``conversation`` covering its first 20 interactions, stored."""
    store = made._store
    caller = {"authorization": f"Bearer {KEY}"}
    tenant = store.tenancy.tenant(credential_from_headers(caller, made.settings.conversation))
    checkpoint = Checkpoint.create(messages, covered=41, summary="SUMMARY of the early turns")
    assert asyncio.run(store.add_checkpoint(tenant, conversation, checkpoint))


def test_recall_notes_of_a_plan_taken_again_are_made_once(
    planning: Planning, monkeypatch: pytest.MonkeyPatch
) -> None:
    annotating = Annotating(monkeypatch)
    made = planning.compactor
    messages = history()
    summarized(made, messages, "c-last")
    first = decide(made, body(messages))
    again = decide(made, body(messages))
    assert (planning.made, annotating.made) == (1, 1)
    other, _ = compactor(SETTINGS, Listeners())
    summarized(other, messages, "c-last")
    assert sent(again) == sent(first) == sent(fresh(body(messages), made=other))
    assert b"recall" in (again.body or b"")  # the tool offered: the notes were made

    grown = [*messages, {"role": "user", "content": "one more question " * 20}]
    after = decide(made, body(grown))
    assert (planning.made, annotating.made) == (3, 3)  # with the other compactor's
    assert sent(after) == sent(fresh(body(grown), made=other))


def budgeted(tokens: int, *, index: bool = True) -> Compactor:
    """A compactor whose prompts must stay under ``tokens`` (``index``: the summary's index
    may be sent)."""
    recall = "" if index else "recall: {index_entries: 0}\n"
    limited = SETTINGS.replace("messages: 1000", f"input_tokens: {tokens}") + recall
    made, _ = compactor(limited, Listeners())
    return made


def test_recall_notes_without_the_index_are_made_apart(tiktoken_files: object) -> None:
    """The notes with the index do not fit, the notes without it do: each pass its own notes,
    also when the plan is taken again."""
    messages = history()
    raw = body(messages)

    def tokens_after(made: Compactor) -> int:
        summarized(made, messages, "c-last")
        return int(sent(decide(made, raw))[1][b"x-compaction-tokens-after"])

    with_index = tokens_after(budgeted(100_000))
    without = tokens_after(budgeted(100_000, index=False))
    assert without < with_index
    made = budgeted(without)
    summarized(made, messages, "c-last")
    expected = budgeted(without, index=False)
    summarized(expected, messages, "c-last")
    first, again = decide(made, raw), decide(made, raw)
    assert sent(first) == sent(again) == sent(decide(expected, raw))
    assert int(sent(first)[1][b"x-compaction-tokens-after"]) == without
