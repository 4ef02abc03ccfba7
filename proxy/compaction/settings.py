"""The part of the configuration the request path of compaction reads, and nothing more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proxy.compaction import protocol
from proxy.config.recall import RecallSettings
from proxy.config.settings import ConversationSettings, Route, Settings, SummarizerSettings
from proxy.core.policy import PolicySettings
from proxy.types import HeaderView


@dataclass(frozen=True)
class Untouched:
    """A request compaction leaves as it came, decided by its headers alone; ``policy``: the
    policy it asked for, when that policy is off."""

    policy: str | None = None


@dataclass(frozen=True)
class CompactionSettings:
    """What the compactor reads: how a conversation is named, the policies and the routes to
    them, the summarizer's global settings and how many messages a request may hold. It is a
    ``proxy.compaction.policies.PolicyTable``."""

    conversation: ConversationSettings
    policies: Mapping[str, PolicySettings]
    routes: tuple[Route, ...]
    summarizer: SummarizerSettings
    max_messages: int
    recall: RecallSettings = field(default_factory=RecallSettings)

    def untouched(self, headers: HeaderView) -> Untouched | None:
        """Whether the headers alone send this request through unread: ``X-Compaction: off``,
        no conversation id under ``missing: passthrough``, or a policy asked for that is off."""
        if protocol.switched_off(headers):
            return Untouched()
        if (
            self.conversation.missing == "passthrough"
            and self.conversation.named_by(headers) is None
        ):
            return Untouched()
        named = protocol.asked_policy(headers)
        if named is not None and named in self.policies and self.policies[named].strategy == "off":
            return Untouched(named)
        return None

    @classmethod
    def of(cls, settings: Settings) -> CompactionSettings:
        return cls(
            conversation=settings.conversation,
            policies=settings.policies,
            routes=settings.routes,
            summarizer=settings.summarizer,
            max_messages=settings.server.max_messages,
            recall=settings.recall,
        )
