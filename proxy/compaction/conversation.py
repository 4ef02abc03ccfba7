"""The conversation one request is about, and how it is built from the request.

A ``Conversation`` holds who and what (tenant, id, policy, model, the cleaned messages, the
body and the dialect that renders it back): enough to plan it, and to summarize it later, off
the request path. It is the type hooks and the admin API see of a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.compaction.dialect.translation import Neutral, Translator
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.model_info import ModelInfos
from proxy.core.facts import FactCache, FactLookup
from proxy.core.interactions import strip_agent_summaries
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.state.tenancy import Credentials, Tenancy
from proxy.types import ChatMessage

CHAT_ROUTE = "chat"  # the dialect of a conversation built without one (the admin API's)


@dataclass(frozen=True)
class Conversation:
    """Who and what one request is about; enough to summarize it later, off the request path."""

    tenant: str
    conversation_id: str
    key: str  # single-flight key within this process
    policy_name: str
    policy: PolicySettings  # calibrated for the model
    model: str
    model_info: ModelInfo | None
    credentials: Credentials | None  # the caller's, for a summarizer that uses the caller's key
    messages: list[ChatMessage]  # cleaned: what checkpoints index and hash
    body: dict[str, Any]
    raw: bytes
    # What is known of its messages: a request's view of the fact cache (closed once the
    # request is answered: a later summary then looks them up in the cache itself), or the cache.
    facts: FactLookup
    heavy: bool = False  # big enough that CPU work runs off the event loop
    dialect: Translator | None = None  # parses the body, renders the plan back (None: admin)
    tools: object = None  # the tool schemas, counted as part of the prompt
    # The provider's cache bucket for this conversation (OpenAI's prompt_cache_key): derived
    # from the tenant and the id, never the id itself; "" when none is set.
    cache_key: str = ""
    # X-Compaction-Focus: one line for the summary this request makes (proxy.compaction.summaries.focus).
    focus: str | None = None

    @property
    def route(self) -> str:
        """The dialect's name, as metrics and hooks show it."""
        return self.dialect.name if self.dialect is not None else CHAT_ROUTE


class Conversations:
    """Builds a request's ``Conversation``: its record key, its policy calibrated for the model,
    the model's window, and its messages without the summaries a client echoed back."""

    def __init__(
        self, *, tenancy: Tenancy, calibration: Calibration, models: ModelInfos, facts: FactCache
    ) -> None:
        self._tenancy = tenancy
        self._calibration = calibration
        self._models = models
        self._facts = facts  # for a conversation built outside a request

    def build(
        self,
        tenant: str,
        conversation_id: str,
        body: dict[str, Any],
        neutral: Neutral,
        policy_name: str,
        policy: PolicySettings,
        *,
        credentials: Credentials | None,
        raw: bytes = b"",
        heavy: bool = False,
        dialect: Translator | None = None,
        facts: FactLookup | None = None,
    ) -> Conversation:
        """The conversation of a parsed request (strips incoming summaries: a pass over the
        messages not known to hold none, run off the event loop for a heavy request)."""
        model = body.get("model") or ""
        return Conversation(
            tenant=tenant,
            conversation_id=conversation_id,
            key=self._tenancy.record_key(tenant, conversation_id),
            policy_name=policy_name,
            policy=self._calibration.policy(policy, model),
            model=model,
            model_info=self._models.info(model),
            credentials=credentials,
            messages=_stripped(neutral, policy.summarizer.final_prompt),
            body=body,
            raw=raw,
            heavy=heavy,
            dialect=dialect,
            tools=neutral.tools,
            facts=facts if facts is not None else self._facts,
            cache_key=(
                self._tenancy.prompt_cache_key(tenant, conversation_id)
                if policy.prompt_cache_key
                else ""
            ),
        )


def _stripped(neutral: Neutral, final_prompt: str | None) -> list[ChatMessage]:
    """The messages without the summaries a client echoed back; those the last body was found
    not to hold are not looked at again, and a body found to hold none says so to the next."""
    messages, parsed = neutral.messages, neutral.parsed
    if parsed is None:
        return strip_agent_summaries(messages, final_prompt=final_prompt)
    checked = parsed.plain_for(final_prompt)
    clean = strip_agent_summaries(messages, final_prompt=final_prompt, checked=checked)
    if clean is messages:
        parsed.plain[:] = [(final_prompt, len(messages))]
    return clean
