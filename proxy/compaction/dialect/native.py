"""``strategy: native``: the provider's own context management, asked for by the proxy.

On a dialect whose provider offers it (``Translator.native``: the Responses API's
``context_management`` compaction, Anthropic's ``context_management.edits``), the request goes out
as the client sent it plus the fields the policy implies (``NativeAsk``); the client's own fields
win. Elsewhere (chat completions, or a model whose provider refused the proxy's fields lately) the
policy's ``native.fallback`` strategy runs instead. What the provider did comes back as a ``NativeReport``
(docs/policies.md, "Native compaction").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.policy import PolicySettings
from proxy.economics.usage import BilledUsage
from proxy.types import ChatMessage

logger = logging.getLogger("proxy.compaction")

NATIVE = "native"
_MAX_UNSUPPORTED = 4096  # models remembered per process; bounded anyway
# How long a confirmed refusal holds: a provider may gain the feature (or an outage may have
# looked like a refusal); one request an hour per model then asks again.
REMEMBERED_SECONDS = 3600.0
_DEFAULT_KEEP_TOOL_USES = 3  # Anthropic's own default for clear_tool_uses' keep


@dataclass(frozen=True)
class NativeAsk:
    """What the policy asks of the provider's context management."""

    trigger_tokens: int | None  # None: the provider's default threshold
    keep_tool_uses: int
    clear_at_least: int  # 0: no minimum batch
    compaction: bool
    clear_tool_uses: bool
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False
    instructions: str | None = None


@dataclass(frozen=True)
class NativeUsage:
    """Tokens the provider's own summarizing used (Anthropic's ``usage.iterations``)."""

    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0

    def billed(self) -> BilledUsage:
        return BilledUsage(
            input_uncached=self.input_tokens,
            cached_read=self.cache_read_input_tokens,
            cache_write=self.cache_creation_input_tokens,
            output=self.output_tokens,
        )


@dataclass(frozen=True)
class NativeReport:
    """What an answer says the provider's context management did."""

    edits: tuple[str, ...] = ()  # the edit types applied, in order ("compaction" for a summary)
    cleared_tool_uses: int = 0
    cleared_input_tokens: int = 0
    compactions: int = 0  # compaction items / blocks the answer carries
    compaction_usage: NativeUsage | None = None  # what the provider's summarizing cost

    @property
    def applied(self) -> bool:
        return bool(self.edits)

    def detail(self) -> str:
        """The ``X-Compaction-Native`` value: ``none``, or each edit with its figures."""
        if not self.edits:
            return "none"
        parts = []
        for edit in dict.fromkeys(self.edits):
            if edit == "compaction":
                parts.append(f"compaction={self.compactions}")
            else:
                parts.append(
                    f"{edit}={self.cleared_tool_uses} tool uses/{self.cleared_input_tokens} tokens"
                )
        return "; ".join(parts)


class NativeAdapter(Protocol):
    """A dialect's own context management (``proxy.dialects.responses_native``,
    ``proxy.dialects.anthropic_native``)."""

    def add(self, body: dict[str, Any], ask: NativeAsk) -> tuple[dict[str, Any], tuple[str, ...]]:
        """(``body`` with the context management ``ask`` implies, merged under the client's
        own; the beta flags the request needs, empty when none)."""
        ...

    def report(self, decoded: bytes) -> NativeReport:
        """What a decoded answer (a JSON body, SSE events, or a stream's head and tail) says
        the provider did."""
        ...

    def refuses(self, status: int, decoded: bytes) -> bool:
        """Whether an error answer refuses the context-management fields or their beta flag."""
        ...

    def names_ours(self, decoded: bytes, client: dict[str, Any], betas: Sequence[str]) -> bool:
        """Whether a refusal names what only the proxy sent: a field, an edit or a flag of a kind
        the client's own request (``client``, its ``anthropic-beta`` flags ``betas``) had none
        of. A refusal naming the client's own is its mistake, not the provider's limit."""
        ...


def ask_of(
    policy: PolicySettings, messages: Sequence[ChatMessage] | None, window: int | None
) -> NativeAsk:
    """The provider's context management a ``native`` policy implies: its trigger (input tokens,
    else the fraction of a known window), its keep counted in tool uses, its clearing batch."""
    trigger = policy.trigger
    tokens: int | None = trigger.input_tokens or None
    if tokens is None and window and trigger.context_fraction > 0:
        tokens = int(window * trigger.context_fraction)
    native = policy.native
    return NativeAsk(
        trigger_tokens=tokens,
        keep_tool_uses=_kept_tool_uses(policy, messages),
        clear_at_least=policy.clear_tool_results.clear_at_least,
        compaction=native.compaction,
        clear_tool_uses=native.clear_tool_uses,
        exclude_tools=native.exclude_tools,
        clear_tool_inputs=native.clear_tool_inputs,
        instructions=native.instructions,
    )


def _kept_tool_uses(policy: PolicySettings, messages: Sequence[ChatMessage] | None) -> int:
    """The tool uses inside what the policy's keep keeps verbatim, as the planner keeps it: the
    last N messages, the last N interactions (0: the current task's newest tool round), at
    least one; a keep in tokens or a fraction keeps the provider's default."""
    keep = policy.keep
    if not messages or (keep.interactions is None and keep.messages is None):
        return _DEFAULT_KEEP_TOOL_USES
    if keep.messages is not None:
        return max(1, _uses(messages[-keep.messages :]))
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    current = users[-1] if users else 0
    n = keep.interactions or 0
    if n == 0:  # only the current task's newest tool round
        rounds = [m for m in messages[current:] if m.get("tool_calls")]
        return max(1, _uses(rounds[-1:]))
    start = users[-n] if len(users) >= n else 0
    return max(1, _uses(messages[start:]))


def _uses(messages: Sequence[ChatMessage]) -> int:
    return sum(len(m.get("tool_calls") or ()) for m in messages)


class Unsupported:
    """The models whose provider refused the proxy's context-management fields (a refusal
    confirmed: the request without them was answered), per route, model and tenant, each
    remembered for ``REMEMBERED_SECONDS`` and logged when it starts. Per tenant: what the
    provider answers one tenant's requests (its key, its ``anthropic-version``) says nothing
    of what it answers the others'."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[str, str, str], float] = {}

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if until > self._clock():
            return True
        del self._until[key]  # expired: the provider is asked again
        return False

    def add(self, route: str, model: str, tenant: str) -> None:
        key = (route, model, tenant)
        if key in self:
            return
        if len(self._until) >= _MAX_UNSUPPORTED:
            self._until.clear()
        self._until[key] = self._clock() + REMEMBERED_SECONDS
        logger.warning(
            "the provider refused context management for %s on /%s: that model runs the "
            "policy's native.fallback for the next %.0f s (for this tenant)",
            model,
            route,
            REMEMBERED_SECONDS,
        )


def planned_policy(policy: PolicySettings, *, native: bool) -> PolicySettings:
    """What the proxy plans a ``native`` policy with: ``summarize`` where the provider compacts
    (the plan counts the request and asks for the shadow summary, never sent), its
    ``native.fallback`` where it does not."""
    strategy = "summarize" if native else policy.native.fallback
    return policy.model_copy(update={"strategy": strategy})
