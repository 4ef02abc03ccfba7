"""Clients towards a running proxy: the official openai client naming a conversation, and the
admin API asked on behalf of a caller."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai

from tests.support.config import ADMIN
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

KEY = "sk-caller-one"  # the caller's API key: its tenant owns the conversations it names


def openai_client(
    server: ThreadedUvicorn,
    conversation: str | None = "conv-1",
    *,
    key: str = KEY,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> openai.OpenAI:
    """The official client towards ``server``, naming ``conversation`` (None: no conversation),
    with ``headers`` on every request; closed when the test ends."""
    default_headers = {"X-Conversation-Id": conversation} if conversation is not None else {}
    default_headers.update(headers or {})
    return closed_after_test(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=key,
            max_retries=0,
            default_headers=default_headers,
            **options,
        )
    )


def admin_get(
    server: ThreadedUvicorn, path: str, *, key: str = KEY, method: str = "GET", **options: Any
) -> httpx.Response:
    """``method path`` on the admin API, for the caller whose API key is ``key``."""
    headers = {"authorization": f"Bearer {ADMIN}", "x-caller-authorization": f"Bearer {key}"}
    return httpx.request(method, f"{server.url}/admin{path}", headers=headers, **options)


def admin_view(server: ThreadedUvicorn, conversation: str, *, key: str = KEY) -> dict[str, Any]:
    """The conversation as the admin API shows it to the caller with ``key``."""
    return admin_get(server, f"/conversations/{conversation}", key=key).json()


def ledger_after(server: ThreadedUvicorn, conversation: str, requests: int) -> dict[str, Any]:
    """The conversation's ledger once it has priced ``requests`` requests (it is written after
    the answer, off the request's path)."""
    deadline = time.monotonic() + 10
    while True:
        response = admin_get(server, f"/conversations/{conversation}/ledger")
        ledger = response.json().get("ledger") if response.status_code == 200 else None
        if ledger is not None and ledger["requests"] >= requests:
            return ledger
        assert time.monotonic() < deadline, response.text
        time.sleep(0.02)
