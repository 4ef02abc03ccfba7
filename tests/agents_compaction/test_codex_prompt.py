"""Codex compacting locally: its compaction prompt sent to ``/v1/responses`` after the history.
Where the proxy holds a summary of that history, it answers at once with one assistant message
holding it (plain, or the Responses SSE events the SDK assembles); the provider gets nothing."""

from __future__ import annotations

import openai
import pytest

from tests.support.codex import MODEL, codex_session, compaction_prompt
from tests.support.responses_provider import INSTRUCTIONS, TOOLS, ResponsesProvider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

pytestmark = pytest.mark.usefixtures("tiktoken_files")


def client(server: ThreadedUvicorn, conversation: str) -> openai.OpenAI:
    return closed_after_test(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key="sk-codex-user",
            max_retries=0,
            default_headers={"X-Conversation-Id": conversation},
        )
    )


def test_codexs_compaction_prompt_is_answered_from_the_ready_summary(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server, "codex-prompt")
    items = codex_session(sdk, 12)
    received = len(responses_provider.mock.received)
    summaries = responses_provider.chat.summaries
    assert summaries >= 1

    raw = sdk.responses.with_raw_response.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        input=compaction_prompt(items),
        tools=TOOLS,
        store=False,
    )

    assert len(responses_provider.mock.received) == received  # nothing reached the provider
    assert raw.headers["x-compaction"] == "answered"
    response = raw.parse()
    assert response.status == "completed"
    assert f"SUMMARY-{summaries}" in response.output_text

    with sdk.responses.stream(
        model=MODEL,
        instructions=INSTRUCTIONS,
        input=compaction_prompt(items),
        tools=TOOLS,
        store=False,
    ) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert len(responses_provider.mock.received) == received
    assert final.output_text == deltas == response.output_text


def test_without_a_summary_the_prompt_goes_to_the_provider(
    serve, responses_provider: ResponsesProvider
) -> None:
    server = serve()
    sdk = client(server, "codex-prompt-fresh")
    items = codex_session(sdk, 1)
    raw = sdk.responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, input=compaction_prompt(items), store=False
    )
    assert raw.headers["x-compaction"] != "answered"
    assert "CONTEXT CHECKPOINT" in str(responses_provider.responses_requests()[-1]["input"][-1])
