"""The ``recalled`` variant of ``eval --recall``: each probe asked through the proxy
that replayed the transcript, with the model under test behind it, so the model may fetch back
what compaction removed with the recall tool and the proxy answers it as it would for a client.

After the replay, the app's upstream (``RecordingUpstream``) goes live: it forwards to the model
under test instead of answering canned. The question request is the transcript plus the
question, as the replay's last request was, with the transcript's tools declared and no
``tool_choice`` (``none`` would forbid the recall tool); a reply that still calls a client tool
instead of answering counts as no answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from proxy.compaction import protocol
from proxy.errors import EvaluationError
from proxy.tools.evaluation.probes import Probe
from proxy.tools.evaluation.proxy_parts import Body, BufferedResponse, RawHeaders
from proxy.tools.evaluation.transcripts import Transcript


@dataclass(frozen=True)
class Recalled:
    probe: Probe
    reply: str
    rounds: int  # recall rounds the proxy ran for it


class LiveUpstream:
    """An ``UpstreamClient`` that sends every chat completion to the model under test."""

    def __init__(self, client: httpx.AsyncClient, *, base_url: str, authorization: str | None):
        self._client = client
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"content-type": "application/json"}
        if authorization:
            self._headers["authorization"] = authorization

    async def send(self, method: str, url: str, headers: RawHeaders, body: Body) -> Any:
        if isinstance(body, bytes | type(None)):
            data = body or b""
        else:
            data = b"".join([chunk async for chunk in body])
        try:
            response = await self._client.post(self._url, content=data, headers=self._headers)
        except httpx.HTTPError as exc:
            raise EvaluationError(f"the model at {self._url}: {type(exc).__name__}") from exc
        # httpx decoded the body: its coding and length headers no longer apply.
        dropped = ("content-encoding", "content-length", "transfer-encoding")
        kept: RawHeaders = [
            (k.encode(), v.encode())
            for k, v in response.headers.items()
            if k.lower() not in dropped
        ]
        return BufferedResponse(response.status_code, kept, response.content)

    async def aclose(self) -> None:
        return None


async def ask_through_proxy(
    app: httpx.AsyncClient,
    headers: dict[str, str],
    transcript: Transcript,
    probes: list[Probe],
    *,
    model: str,
    max_tokens: int,
    suffix: str,
) -> list[Recalled]:
    """Each probe asked through the app (one at a time: they share one conversation)."""
    out = []
    for probe in probes:
        question = {"role": "user", "content": f"{probe.question} {suffix}"}
        body: dict[str, Any] = {
            "model": model,
            "messages": [*transcript.messages, question],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        if transcript.tools:
            body["tools"] = transcript.tools
        response = await app.post("/v1/chat/completions", json=body, headers=headers)
        if response.status_code != 200:
            raise EvaluationError(
                f"a question through the proxy failed (HTTP {response.status_code}): "
                f"{response.text[:300]}"
            )
        try:
            reply = response.json()["choices"][0]["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EvaluationError("the model returned an unexpected body") from exc
        rounds = int(response.headers.get(protocol.RECALLS, "0") or 0)
        out.append(Recalled(probe, str(reply), rounds))
    return out
