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

from dataclasses import dataclass, replace

from proxy.compaction.decision import Answer, Decision, NativeAttempt, Resend
from proxy.proxying.responses import BufferedResponse
from proxy.upstream.base import UpstreamResponse
from proxy.upstream.content_coding import decoded

# Held whole to report on it: a larger answer is relayed as a stream, reported afterwards.
MAX_HELD_BYTES = 8 * 1024 * 1024
_REFUSALS = frozenset({400, 422})


@dataclass(frozen=True, eq=False)
class NativeStage:
    """The answer stage of a request sent with the provider's context management: a refusal
    of the fields answered by the plain request instead, a whole answer reported on."""

    attempt: NativeAttempt
    statuses = _REFUSALS | {200}
    stream_statuses = _REFUSALS  # a stream is reported after it ended (the follow-up)

    async def run(self, answer: Answer, resend: Resend) -> Answer:
        response, decision = await native_answer(
            answer.response, answer.decision, self.attempt, resend
        )
        return Answer(response, decision)


async def native_answer(
    response: UpstreamResponse, decision: Decision, attempt: NativeAttempt, resend: Resend
) -> tuple[UpstreamResponse, Decision]:
    """(the answer to relay, the decision it answers): the plain request's after a refusal."""
    if response.status in _REFUSALS:
        body = await _read(response)
        if attempt.refused(response.status, decoded(body, response.headers)):
            plain = attempt.plain
            assert plain.body is not None  # the client's request as it came
            answer = await resend(plain.body)
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
    return buffered, replace(decision, response_headers=headers)


async def _read(response: UpstreamResponse) -> bytes:
    try:
        return await response.read()
    finally:
        await response.aclose()
