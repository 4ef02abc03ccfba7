"""The model under test (and the judge): one chat completion at a time against an
OpenAI-compatible endpoint, with foreign errors mapped to ``EvaluationError``."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.errors import EvaluationError


class ChatEndpoint:
    """``POST {base_url}/chat/completions`` through a shared httpx client."""

    def __init__(
        self, client: httpx.AsyncClient, *, base_url: str, authorization: str | None
    ) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": authorization} if authorization else {}

    async def complete(
        self, messages: list[dict[str, Any]], *, model: str, max_tokens: int, **extra: Any
    ) -> str:
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            **extra,
        }
        try:
            response = await self._client.post(self._url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise EvaluationError(f"{model} at {self._url}: {type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise EvaluationError(
                f"{model} at {self._url} answered HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            data = response.json()
            text = data["choices"][0]["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EvaluationError(f"{model} at {self._url} returned an unexpected body") from exc
        return str(text)
