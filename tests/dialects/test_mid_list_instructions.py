"""System and developer messages among the turns on the OpenAI routes: chat completions and the
Responses API take them anywhere in the list (Anthropic's route has its own rules:
test_anthropic_system_messages.py). Through a real proxy with compaction applied, the request is
answered and an instruction in the kept turns reaches the provider where the client put it."""

from __future__ import annotations

from typing import Any

from tests.support.clients import openai_client
from tests.support.config import EVERY_THREE_INTERACTIONS, summarizing
from tests.support.provider import SYSTEM, Provider
from tests.support.responses_provider import DEVELOPER, ResponsesProvider, long_input

NOTE = {"role": "system", "content": "From now on, answer in French."}
DEV_NOTE = {"role": "developer", "content": "The tests now live in tests/unit."}


def chat_history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [SYSTEM]
    for n in range(5):
        history.append({"role": "user", "content": f"question {n}: " + "w " * 80})
        if n == 1:
            history.append(DEV_NOTE)  # an older instruction, inside its interaction
        history.append({"role": "assistant", "content": f"answer {n}: " + "w " * 80})
    history += [{"role": "user", "content": "last question"}, NOTE]
    return history


def test_chat_completions_take_system_and_developer_messages_among_the_turns(
    mock, start_proxy
) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    history = chat_history()
    raw = openai_client(server, "chat-notes").chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history
    )
    assert raw.status_code == 200 and raw.headers["x-compaction"] == "applied"
    sent = [r.json() for r in mock.chat_requests() if r.json()["model"] == "gpt-4o"][-1]
    messages = sent["messages"]
    assert messages[0] == SYSTEM and "<agent_summary>" in messages[1]["content"]
    assert messages[-2:] == history[-2:]  # the last question, then its instruction, in place
    assert len(messages) < len(history) and provider.summaries == 1


def test_the_responses_api_takes_system_and_developer_items_among_the_turns(
    mock, start_proxy
) -> None:
    ResponsesProvider(mock)
    server = start_proxy(summarizing(mock.url, policy=EVERY_THREE_INTERACTIONS))
    items = long_input()
    items.insert(5, {"type": "message", **DEV_NOTE})  # an older one, inside its interaction
    items.append({"type": "message", **NOTE})
    raw = openai_client(server, "responses-notes").responses.with_raw_response.create(
        model="gpt-4o", input=items, store=False
    )
    assert raw.status_code == 200 and raw.headers["x-compaction"] == "applied"
    sent = next(r.json() for r in reversed(mock.received) if r.path.endswith("/responses"))
    kept = sent["input"]
    assert kept[0] == DEVELOPER and "<agent_summary>" in str(kept[1]["content"])
    assert kept[-2:] == items[-2:]  # the last step, then its instruction, in place
    assert len(kept) < len(items)
