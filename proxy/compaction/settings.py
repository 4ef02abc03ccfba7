"""The part of the configuration the request path of compaction reads, and nothing more."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proxy.config.recall import RecallSettings
from proxy.config.settings import ConversationSettings, Route, Settings, SummarizerSettings
from proxy.core.policy import PolicySettings


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
