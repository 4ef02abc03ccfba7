"""A body past ``offload.OFFLOAD_BYTES`` is read and planned in a worker thread, so that other
clients are not held up: unless it follows its conversation's last body, where only what is
new is read and planning carries the rest. Either way the provider gets the same bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from proxy import wirejson
from proxy.compaction import reading
from proxy.compaction.offload import OFFLOAD_BYTES
from proxy.events import Listeners
from tests.compaction.test_decide import compactor, incoming

POLICY = """
store: {tenant_secret: big-followed-bodies-secret-0123456789}
policies:
  default: {strategy: neuralyze, trigger: {messages: 4}, keep: {interactions: 2}}
"""


def history(turns: int, first: str = "You help.") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": first}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"question {i}: " + "why " * 400},
            {"role": "assistant", "content": f"answer {i}: " + "because " * 400},
        ]
    return messages


def body(messages: list[dict[str, Any]]) -> bytes:
    return wirejson.encode({"model": "gpt-4o", "messages": messages})


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each function the read and the plan hand to a worker thread."""
    made: list[str] = []
    handed = reading.work

    async def counted(heavy: bool, function: Callable[..., Any], *args: Any) -> Any:
        made.append(getattr(function, "__name__", repr(function)))
        return await handed(heavy, function, *args)

    monkeypatch.setattr(reading, "work", counted)
    return made


def test_a_big_body_that_follows_the_last_is_worked_on_without_a_thread(
    tiktoken_files: object, trips: list[str]
) -> None:
    made, _ = compactor(POLICY, Listeners())
    fresh, _ = compactor(POLICY, Listeners())  # has seen no earlier body: reads each in full
    # (the same tenant secret: the same prompt cache key in what it sends)
    old = history(220)
    grown = [*old, {"role": "user", "content": "and now?"}]
    retouched = [*old, {"role": "user", "content": "and now, then?"}]  # its newest changed
    edited = [*history(220, first="You are kind."), {"role": "user", "content": "and now?"}]
    assert len(body(old)) > OFFLOAD_BYTES

    def sent(compactor_: Any, messages: list[dict[str, Any]]) -> tuple[bytes | None, bool]:
        """What the provider gets, and whether a worker thread was used on the way."""
        request, _ = incoming(body(messages), streamable=False, x_conversation_id="big-1")
        trips.clear()
        return asyncio.run(compactor_.decide(request)).body, bool(trips)

    assert sent(made, old)[1], "a big body seen first goes to a worker thread"
    # The same history with a turn more, then with that turn changed (as Claude Code moves
    # its cache mark to the newest message): read right here, and sent as a fresh read sends it.
    for messages in (grown, retouched):
        followed, threaded = sent(made, messages)
        assert not threaded
        assert followed == sent(fresh, messages)[0]
    assert followed is not None
    assert wirejson.parse(followed)["messages"][-1]["content"] == "and now, then?"
    changed, threaded = sent(made, edited)  # changed from its first message: read in full
    assert threaded
    assert changed == sent(fresh, edited)[0]
