"""The recall rounds of one request, one at a time: a reply's recall calls answered
from the originals and the request sent again with them; what the rounds were billed. The loop
(``loop.py``) and a stream that recalls after its text (``stream.py``) share one
``Asker`` per request, so ``recall.max_rounds`` and ``recall.timeout_seconds`` bound them all.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from proxy import tracing, wirejson
from proxy.compaction import protocol
from proxy.compaction.dialect.recall import Answered, CallStrip, ModelReply, ToolCall
from proxy.compaction.recall.tool import RecallSession
from proxy.proxying.recall.usage import round_usage
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamResponse

Send = Callable[[bytes], Awaitable[UpstreamResponse]]


class Asker:
    """The rounds of one request: each answers a reply's recall calls and asks again."""

    def __init__(self, session: RecallSession, sent: bytes, send: Send) -> None:
        self.session = session
        self.tails: list[bytes] = []  # each round's answer, decoded: its usage
        self._sent = sent
        self._send = send
        self._body: dict[str, Any] | None = None
        self._usages: list[dict[str, int]] = []
        self._deadline = time.monotonic() + session.settings.timeout_seconds
        self._spent = False  # the re-ask that ends the rounds was sent

    def recalls(self, reply: ModelReply | None) -> list[ToolCall]:
        """The reply's recall calls to answer; none once the rounds are spent."""
        if reply is None or self._spent:
            return []
        return [c for c in reply.calls if c.name == self.session.tool_name]

    def leftover(self, reply: ModelReply | None) -> CallStrip | None:
        """What takes the recall calls out of a final reply that still makes some (its provider
        ignored the last re-ask's ``tool_choice: none``): the client never declared the tool,
        so they are removed before it is relayed. None: the reply makes none."""
        if reply is None or not any(c.name == self.session.tool_name for c in reply.calls):
            return None
        return self.session.shape.strip(self.session.tool_name)

    async def again(
        self, reply: ModelReply, recalls: list[ToolCall], tail: bytes
    ) -> UpstreamResponse:
        """Answer ``recalls`` and send the request again with them (``tail``: the reply's
        usage); the re-ask that ends the rounds forbids tools."""
        self.tails.append(tail)
        rounds = len(self.tails)
        settings = self.session.settings
        # One span a round (proxy.tracing; a no-op while tracing is off): numbers only.
        with tracing.span(
            tracing.RECALL_ROUND, {"recall.round": rounds, "recall.calls": len(recalls)}
        ):
            answers = await self.session.answer_round(recalls)
            if self._body is None:
                self._body = wirejson.parse(self._sent)
            last = rounds >= settings.max_rounds or time.monotonic() >= self._deadline
            self._spent = last
            answered = Answered(reply, answers, settings.tool_name, last)
            self._body = self.session.shape.ask_again(self._body, answered)
            return await self._send(wirejson.encode(self._body))

    def usages(self) -> list[dict[str, int]]:
        """Each round's usage numbers (read once per round)."""
        while len(self._usages) < len(self.tails):
            self._usages.append(round_usage(self.tails[len(self._usages)]))
        return self._usages

    def headers(self) -> RawHeaders:
        tokens = self.session.round_tokens(self.tails)
        return [
            (protocol.RECALLS_BYTES, str(len(self.tails)).encode()),
            (protocol.RECALL_TOKENS_BYTES, str(tokens).encode()),
        ]
