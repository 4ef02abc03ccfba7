"""Only the proxy's own ``<agent_summary>`` is stripped: a client's message that happens to use
the same tag is the client's content and reaches the provider untouched."""

from __future__ import annotations

import openai

from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider


def test_a_clients_own_tagged_message_is_forwarded_untouched(mock, start_proxy) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url))
    own = {"role": "system", "content": "<agent_summary>x</agent_summary>"}
    messages = [SYSTEM, own, {"role": "user", "content": "hello"}]
    raw = openai_client(server).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages
    )
    assert provider.chat_requests()[-1]["messages"] == messages
    assert raw.headers["x-compaction"] == "skipped"


def test_our_own_summary_echoed_back_is_still_stripped(mock, start_proxy) -> None:
    provider = Provider(mock)
    server = start_proxy(summarizing(mock.url))
    client = openai_client(server)
    history = [SYSTEM]
    for turn in range(9):
        history.append({"role": "user", "content": f"Step {turn}"})
        reply = client.chat.completions.create(model="gpt-4o", messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    sent = provider.chat_requests()[-1]["messages"]
    ours = sent[1]
    assert ours["content"].startswith("<agent_summary>")
    # A client that stored what the provider saw sends our summary back: it must not stack.
    echoed = [history[0], ours, *history[1:], {"role": "user", "content": "next"}]
    client.chat.completions.create(model="gpt-4o", messages=echoed)
    again = provider.chat_requests()[-1]["messages"]
    assert sum(str(m.get("content", "")).startswith("<agent_summary>") for m in again) == 1
    assert isinstance(client, openai.OpenAI)
