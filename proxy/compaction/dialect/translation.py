"""What compaction needs of a wire dialect: translation, and the shapes of its native
compaction and of the recall tool.

A dialect (``proxy.dialects``) parses its wire body, gives the conversation in the core's neutral
model and renders a plan back. Compaction knows dialects through this protocol alone, so it
imports none of them; where a request goes and with which credentials is the route's business,
never compaction's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from proxy.compaction.dialect.native import NativeAdapter
from proxy.compaction.dialect.recall import RecallShape
from proxy.core.facts import FactLookup
from proxy.core.plan import Plan
from proxy.core.resent import ParsedBody
from proxy.types import ChatMessage


@dataclass(frozen=True)
class Neutral:
    """A request's conversation in the core's model."""

    messages: list[ChatMessage]
    tools: object = None  # tool schemas, counted as part of the prompt
    # The body whose history ``messages`` is, the very list: what is learnt of its messages is
    # carried to the conversation's next body (``ParsedBody.plain``); None: nothing is carried.
    parsed: ParsedBody | None = None


class Translator(Protocol):
    """One wire dialect as compaction uses it (chat completions, Responses, Anthropic Messages)."""

    name: str  # the route label of metrics, logs and hooks
    history_field: str  # the body field holding the conversation, named in errors

    # The three members below are read-only, so a dialect may declare each as a class attribute
    # of its own narrower type (``native = None``).
    # The body field that names a prompt cache bucket (OpenAI's prompt_cache_key), set on a
    # body the proxy rewrites when the client sent none; None: the API has no such field.
    @property
    def cache_key_field(self) -> str | None: ...
    # The API's own context management (``strategy: native``); None: it has none.
    @property
    def native(self) -> NativeAdapter | None: ...
    # The recall tool in this dialect's shape (offered, read back, answered:
    # ``proxy.compaction.dialect.recall``); None: recall is never offered on this route.
    @property
    def recall(self) -> RecallShape | None: ...

    def parse(self, raw: bytes, last: ParsedBody | None = None, follow: bool = False) -> ParsedBody:
        """The parsed body; InvalidRequest when no request of this dialect could be valid.
        ``follow``: locate its history in its bytes, and take from ``last``, the conversation's
        previous body, the items it begins with (``proxy.core.resent``); else parsed whole."""
        ...

    def conversation(
        self,
        body: dict[str, Any],
        *,
        facts: FactLookup | None = None,
        parsed: ParsedBody | None = None,
    ) -> Neutral | None:
        """The conversation to compact (validated through ``facts``); None when the provider
        holds the history: forwarded unchanged, ``X-Compaction: off``. ``parsed``, the body as
        parsed, carries what the last body's items were made into (``ParsedBody.translated``)."""
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
