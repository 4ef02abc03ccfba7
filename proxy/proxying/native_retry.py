"""The answer to a request sent with the provider's own context management (``strategy:
native``), looked at before it is relayed.

An error that refuses the fields (an older API version, a compatible server without them) is
never shown to the client, who did not send them: the client's request goes out again as it
came, once (``NativeAttempt.plain``), and compaction remembers the model when that one is
answered (the refusal was of the proxy's fields, not of the client's request). A whole (not streamed)
answer is read before its headers go out, so that ``X-Compaction`` can say what the provider
did; a stream is relayed as it comes and reported after it ended (the follow-up).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from proxy.compaction.decision import Decision, NativeAttempt
from proxy.proxying.responses import BufferedResponse
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import decoded

# Held whole to report on it: a larger answer is relayed as a stream, reported afterwards.
MAX_HELD_BYTES = 8 * 1024 * 1024
_REFUSALS = (400, 422)

Resend = Callable[[Decision], Awaitable[UpstreamResponse]]


def with_upstream_headers(headers: RawHeaders, decision: Decision) -> RawHeaders:
    """``headers`` with the decision's own (``anthropic-beta``) in place of the client's."""
    if not decision.upstream_headers:
        return headers
    names = {name.lower() for name, _ in decision.upstream_headers}
    kept = [(name, value) for name, value in headers if name.lower() not in names]
    return [*kept, *decision.upstream_headers]


async def native_answer(
    response: UpstreamResponse, decision: Decision, attempt: NativeAttempt, resend: Resend
) -> tuple[UpstreamResponse, Decision]:
    """(the answer to relay, the decision it answers): the plain request's after a refusal."""
    if response.status in _REFUSALS:
        body = await _read(response)
        if attempt.refused(response.status, decoded(body, response.headers)):
            plain = attempt.plain
            answer = await resend(plain)
            attempt.retried(answer.status)
            return answer, plain
        return BufferedResponse(response.status, response.headers, body), decision
    if decision.streaming or response.status != 200:
        return response, decision
    body = await _read(response)
    if len(body) > MAX_HELD_BYTES:
        return BufferedResponse(response.status, response.headers, body), decision
    headers = attempt.reported(decoded(body, response.headers))
    buffered = BufferedResponse(response.status, response.headers, body)
    return buffered, Decision(
        body=decision.body,
        response_headers=headers,
        follow_up=decision.follow_up,
        streaming=decision.streaming,
    )


async def _read(response: UpstreamResponse) -> bytes:
    try:
        return await response.read()
    finally:
        await response.aclose()
