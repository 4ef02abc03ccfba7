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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from proxy.compaction.native import NativeAdapter
from proxy.compaction.translation import Neutral
from proxy.core.digests import DIALECT_FIELD
from proxy.core.facts import FactLookup
from proxy.core.planner import Plan
from proxy.errors import ProxyError

WIRE = "_wire"
HASHED = DIALECT_FIELD  # "_hash"


class Dialect(Protocol):
    """Translation of one wire dialect (chat completions, Responses API, Anthropic Messages):
    its body to the neutral conversation and the plan back, and its error shape. Where its
    requests go and with whose key is the route's (``proxy.proxying.targets``)."""

    name: str  # the route label of metrics and logs
    history_field: str  # the body field holding the conversation, named in errors
    # The body field that names a prompt cache bucket (OpenAI's prompt_cache_key), set on a
    # body the proxy rewrites when the client sent none; None: the API has no such field.
    cache_key_field: str | None
    # Its bodies are transcripts ``compaction-proxy eval`` replays as they are (chat-shaped):
    # the recorder (``record.path``) keeps them.
    records: bool
    # The API's own context management (``strategy: native``); None: it has none.
    native: NativeAdapter | None

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The parsed body; InvalidRequest when no request of this dialect could be valid."""
        ...

    def conversation(
        self, body: dict[str, Any], *, facts: FactLookup | None = None
    ) -> Neutral | None:
        """The conversation to compact (``facts``: the request's message facts, for
        validation); None when the body is not compactable as it is (the
        provider holds the history): forwarded unchanged, ``X-Compaction: off``."""
        ...

    def render(self, body: dict[str, Any], plan: Plan) -> dict[str, Any]:
        """The body to send for ``plan`` (made from ``conversation(body)``)."""
        ...

    def summary_call(
        self, sent: dict[str, Any], instruction: str, max_tokens: int
    ) -> dict[str, Any] | None:
        """The body asking the conversation's own model for a summary on the prompt ``sent``
        (a body of this dialect, as the proxy sent it) with ``instruction`` after it; None when
        this dialect makes none (``proxy.dialects.summary_calls``)."""
        ...

    def answer_text(self, answer: dict[str, Any]) -> str | None:
        """The text of a (non-streamed) answer of this dialect; None when it holds none."""
        ...

    def error_body(self, error: ProxyError) -> bytes:
        """An error of ours in this dialect's shape."""
        ...


def wire_groups(plan: Plan) -> Iterator[tuple[list[Any] | None, list[dict[str, Any]]]]:
    """The sent messages in order, grouped by the wire list they stand for: (``_wire``, its
    neutral messages); an injected message (no ``_wire``) comes as (None, [message])."""
    current: list[Any] | None = None
    members: list[dict[str, Any]] = []
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
