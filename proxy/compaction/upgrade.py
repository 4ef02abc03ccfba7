"""The crossing before ``Compactor.decide`` (``ClientRequest`` in, ``Outgoing`` out, three
callbacks in a data object), served over ``decide`` so that a route of either kind works. To be
removed once every route calls ``decide``."""

from __future__ import annotations

from proxy.compaction.decision import ClientRequest, Decision, FollowUp, Incoming, Outgoing
from proxy.types import HeaderView


class _ReadBytes:
    """A ``BodySource`` over a body already read."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    async def read(self) -> bytes:
        return self._raw


class _Retry:
    """``Outgoing.retry`` over ``FollowUp.replacement``."""

    def __init__(self, follow_up: FollowUp) -> None:
        self._follow_up = follow_up

    async def __call__(self) -> Outgoing | None:
        replaced = await self._follow_up.replacement()
        return outgoing_of(replaced) if replaced is not None else None


def incoming_of(request: ClientRequest) -> Incoming:
    """A request whose body was read whole, as ``decide`` takes it."""
    return Incoming(
        headers=HeaderView.of(request.headers),
        body=_ReadBytes(request.raw),
        dialect=request.dialect,
        credentials=request.credentials,
        streamable=False,
    )


def outgoing_of(decision: Decision) -> Outgoing:
    """A decision on a body read whole (so never None), as the older route takes it."""
    assert decision.body is not None, "a body read whole is sent as bytes"
    follow_up = decision.follow_up
    if follow_up is None:
        return Outgoing(body=decision.body, response_headers=decision.response_headers)
    return Outgoing(
        body=decision.body,
        response_headers=decision.response_headers,
        after=follow_up.answered,
        retry=_Retry(follow_up),
        observe=follow_up.observe,
    )
