"""What the evaluation takes from the proxy, in one place.

Keeping every import of the proxy (its core in ``proxy/core/``) here makes a move of any of it
one edit for this package. Only public entry points are used: the app as a whole (so a
replay goes through the real planner, store and summarizer), the token counter, and the
summarizer's identifier finder.
"""

from __future__ import annotations

from proxy.app import create_app
from proxy.compaction.policies import choose_policy
from proxy.compaction.protocol import POLICY as POLICY_HEADER
from proxy.compaction.summaries.transcript import identifiers, transcript_line
from proxy.config.settings import Settings, load_settings
from proxy.core.messages import content_text
from proxy.core.policy import ModelInfo
from proxy.core.tokens import TokenCounter, lookup_model
from proxy.errors import ConfigError
from proxy.proxying.responses import BufferedResponse
from proxy.types import RawHeaders
from proxy.upstream.base import Body

__all__ = [
    "POLICY_HEADER",
    "Body",
    "BufferedResponse",
    "ConfigError",
    "ModelInfo",
    "RawHeaders",
    "Settings",
    "TokenCounter",
    "choose_policy",
    "content_text",
    "create_app",
    "identifiers",
    "load_settings",
    "lookup_model",
    "transcript_line",
]
