"""TEMPORARY (issue 18, until ``Compactor.decide`` lands): the route's one call into compaction,
``decide(incoming) -> Decision``, made over the Rewriter of before (``untouched`` + ``rewrite``
returning an ``Outgoing`` with callbacks). Delete this module and pass the compactor itself to
the routes (proxy/app.py) once compaction decides."""

from __future__ import annotations

from proxy.compaction.decision import (
    ClientRequest,
    Decision,
    Incoming,
    Outgoing,
    Rewriter,
)
from proxy.types import RawHeaders


class RewriterDecisions:
    """Decides as the Rewriter rewrites (``proxy.proxying.routes.Compaction``)."""

    def __init__(self, rewriter: Rewriter) -> None:
        self._rewriter = rewriter

    async def decide(self, incoming: Incoming) -> Decision:
        if incoming.streamable:
            kept = self._rewriter.untouched(incoming.headers.raw)
            if kept is not None:
                return Decision(body=None, response_headers=kept)
        request = ClientRequest(
            raw=await incoming.body.read(),
            headers=incoming.headers.raw,
            dialect=incoming.dialect,
            credentials=incoming.credentials,
        )
        return _decision(request, await self._rewriter.rewrite(request))


def _decision(request: ClientRequest, outgoing: Outgoing) -> Decision:
    follow_up = None
    if outgoing.observe or outgoing.retry or outgoing.after:
        follow_up = _Callbacks(request, outgoing)
    return Decision(
        body=outgoing.body,
        response_headers=outgoing.response_headers,
        follow_up=follow_up,
        # Only a parsed body offers a retry: never parse one just for this.
        streaming=outgoing.retry is not None and request.body.get("stream") is True,
    )


class _Callbacks:
    """An Outgoing's callbacks as a FollowUp."""

    def __init__(self, request: ClientRequest, outgoing: Outgoing) -> None:
        self._request = request
        self._outgoing = outgoing

    def observe(self, status: int, headers: RawHeaders, tail: bytes) -> None:
        if self._outgoing.observe is not None:
            self._outgoing.observe(status, headers, tail)

    async def replacement(self) -> Decision | None:
        if self._outgoing.retry is None:
            return None
        retried = await self._outgoing.retry()
        return None if retried is None else _decision(self._request, retried)

    def answered(self) -> None:
        if self._outgoing.after is not None:
            self._outgoing.after()
