"""Codex's own compaction endpoint, ``POST /v1/responses/compact``, in front of a provider that
has none (a chat-only server, a local one, another vendor's model): the proxy answers it with its
summarizer and a sealed compaction item, and opens that item again when it comes back in a later
request's ``input``, so the provider only ever sees the summary as text."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.codex import MODEL, codex_session
from tests.support.responses_provider import INSTRUCTIONS, TOOLS, ResponsesProvider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

KEY = "sk-codex-user"

pytestmark = pytest.mark.usefixtures("tiktoken_files")


def client(server: ThreadedUvicorn, key: str = KEY, conversation: str = "codex-1") -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=key,
            max_retries=0,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def history(rounds: int = 4) -> list[dict[str, Any]]:
    """A Codex-like history: the task, tool rounds, an answer."""
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "fix the tests in src/app.py"}],
        }
    ]
    for n in range(rounds):
        items += [
            {
                "type": "function_call",
                "call_id": f"call_{n}",
                "name": "run_tests",
                "arguments": "{}",
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{n}",
                "output": f"FAILED test_{n}\n" * 20,
            },
        ]
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "All tests pass now.", "annotations": []}],
        }
    )
    return items


def compaction_items(output: list[Any]) -> list[Any]:
    return [item for item in output if item.type == "compaction"]


def test_compact_is_answered_by_the_proxy_when_the_provider_lacks_it(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server)
    items = history()

    compacted = sdk.responses.compact(model=MODEL, input=items, instructions=INSTRUCTIONS)

    paths = [r.path for r in responses_provider.mock.received]
    assert not any(p.endswith("/responses/compact") for p in paths)  # never reached the provider
    assert responses_provider.chat.summaries == 1  # the proxy's summarizer wrote it
    assert compacted.object == "response.compaction"
    found = compaction_items(compacted.output)
    assert len(found) == 1 and compacted.output[-1].type == "compaction"
    # Every user message of the input, then the compaction item (as OpenAI's endpoint answers).
    users = [o for o in compacted.output if o.type == "message"]
    assert [u.role for u in users] == ["user"] and "src/app.py" in json.dumps(
        users[0].model_dump(warnings=False)
    )
    sealed = found[0].encrypted_content
    assert "SUMMARY-" not in sealed and "agent edited" not in sealed  # opaque to the client


def test_the_compaction_item_is_opened_before_the_provider_sees_it(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server)
    compacted = sdk.responses.compact(model=MODEL, input=history(), instructions=INSTRUCTIONS)
    carried = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    follow = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "now add a test"}],
    }

    raw = sdk.responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, input=[*carried, follow], tools=TOOLS, store=False
    )

    assert raw.status_code == 200
    sent = [r.json() for r in responses_provider.mock.received if r.path.endswith("/responses")][-1]
    kinds = [item.get("type", "message") for item in sent["input"]]
    assert "compaction" not in kinds  # the provider never sees our sealed blob
    texts = json.dumps(sent["input"])
    assert "<agent_summary>" in texts and "SUMMARY-1" in texts
    assert sent["input"][-1] == follow


def test_an_item_sealed_for_another_caller_does_not_open(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    compacted = client(server).responses.compact(
        model=MODEL, input=history(), instructions=INSTRUCTIONS
    )
    carried = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    other = client(server, key="sk-someone-else", conversation="codex-2")

    other.responses.create(model=MODEL, input=carried, store=False)

    sent = [r.json() for r in responses_provider.mock.received if r.path.endswith("/responses")][-1]
    texts = json.dumps(sent["input"])
    assert "SUMMARY-1" not in texts and "compaction" not in [i.get("type") for i in sent["input"]]


def test_compact_is_answered_from_the_ready_summary_with_no_call_at_all(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server, conversation="codex-ready")
    items = codex_session(sdk, 12)
    summaries = responses_provider.chat.summaries
    received = len(responses_provider.mock.received)
    assert summaries >= 1

    raw = sdk.responses.with_raw_response.compact(
        model=MODEL, input=items, instructions=INSTRUCTIONS
    )

    assert len(responses_provider.mock.received) == received  # neither provider nor summarizer
    assert raw.headers["x-compaction"] == "answered"
    assert raw.headers["x-compaction-checkpoint"]
    carried = [item.model_dump(exclude_none=True, warnings=False) for item in raw.parse().output]
    sdk.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=carried, store=False)
    sent = responses_provider.responses_requests()[-1]
    assert f"SUMMARY-{summaries}" in json.dumps(sent["input"])


def test_when_the_summarizer_fails_the_compact_goes_to_the_provider(
    serve, responses_provider: ResponsesProvider
) -> None:
    responses_provider.chat.fail_summaries = True
    server = serve()
    body = {"model": MODEL, "input": history(), "instructions": INSTRUCTIONS}
    headers = {"authorization": f"Bearer {KEY}", "x-conversation-id": "codex-down"}

    answer = httpx.post(f"{server.url}/v1/responses/compact", json=body, headers=headers)

    assert answer.headers["x-compaction"] == "failed"
    compacts = [
        r for r in responses_provider.mock.received if r.path.endswith("/responses/compact")
    ]
    assert len(compacts) == 1 and compacts[0].json() == body  # as the client sent it


def test_the_item_is_opened_even_where_compaction_is_off(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server)
    compacted = sdk.responses.compact(model=MODEL, input=history(), instructions=INSTRUCTIONS)
    carried = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]

    sdk.responses.create(
        model=MODEL, input=carried, store=False, extra_headers={"X-Compaction": "off"}
    )

    sent = responses_provider.responses_requests()[-1]
    assert "compaction" not in [i.get("type") for i in sent["input"]]
    assert "SUMMARY-1" in json.dumps(sent["input"])
