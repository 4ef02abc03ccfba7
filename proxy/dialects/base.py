"""What a wire dialect provides, and the neutral conversation it translates to.

The neutral model is the core's (``proxy.core``): chat-shaped message dicts with ``role``
(system, developer, user, assistant, tool), ``content`` (a string or text/image parts, what is
counted), ``tool_calls`` (``id`` + function name and arguments) and ``tool_call_id``. A dialect
whose wire items are not chat messages (Responses API items, Anthropic content blocks) puts on
each neutral message it builds two private keys the core carries along untouched:

- ``_wire``: the list of wire items this message stands for. Rendering walks the plan's messages
  and puts each message's ``_wire`` back unchanged (one list shared by several neutral messages,
  such as one Anthropic user message holding three tool results, is put back once).
- ``_hash``: what of those items reaches the model (without cache hints that clients move from
  turn to turn), hashed into the checkpoint chain next to the chat fields.

A message without ``_wire`` in a plan was injected by the planner: the summary or a notice.

Types: neutral messages are ``ChatMessage`` (``proxy.types``) while a dialect builds them, wire
shapes that several modules read are ``AnthropicBlock``/``AnthropicMessage``/``ResponsesItem``.
A request or response body, a stream event and an item being checked stay ``dict[str, Any]``:
that is the edge where JSON comes in, with any keys and values, read only after a check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol

from proxy.compaction.dialect.translation import Neutral, Translator
from proxy.core.digests import DIALECT_FIELD as HASHED
from proxy.core.plan import Plan
from proxy.errors import ProxyError
from proxy.types import ChatMessage

__all__ = ["HASHED", "WIRE", "Dialect", "Neutral", "cleared_wires", "wire_groups"]

WIRE: Final = "_wire"


class Dialect(Translator, Protocol):
    """Translation of one wire dialect (chat completions, Responses API, Anthropic Messages):
    what compaction needs of it (``Translator``: parse, the neutral conversation, render, the
    summary call on the cached prefix), and what the route needs besides: whether its bodies
    are recorded, and its error shape. Where its requests go and with whose key is the route's
    (``proxy.proxying.targets``)."""

    # Its bodies are transcripts ``compaction-proxy eval`` replays as they are (chat-shaped):
    # the recorder (``record.path``) keeps them.
    records: bool

    def error_body(self, error: ProxyError) -> bytes:
        """An error of ours in this dialect's shape."""
        ...


def wire_groups(plan: Plan) -> Iterator[tuple[list[Any] | None, list[ChatMessage]]]:
    """The sent messages in order, grouped by the wire list they stand for: (``_wire``, its
    neutral messages); an injected message (no ``_wire``) comes as (None, [message])."""
    current: list[Any] | None = None
    members: list[ChatMessage] = []
    for message in plan.messages:
        wire = message.get(WIRE)
        if wire is not None and wire is current:
            members.append(message)
            continue
        if members:
            yield current, members
        current, members = wire, [message]
    if members:
        yield current, members


def cleared_wires(plan: Plan) -> set[int]:
    """ids of the ``_wire`` lists whose tool result the plan replaced by a stub (the stub is
    the neutral message's ``content``)."""
    return {id(plan.source[i][WIRE]) for i in plan.cleared if plan.source[i].get(WIRE) is not None}
