"""The settings sections of state: ``store:`` and ``conversation:`` (the YAML contract,
docs/configuration.md). The root ``proxy.config.settings.Settings`` holds them; the store and the
tenancy are given only their own section. They live in config, not beside the store, because the
root settings must import them and state imports config: a section in state made the two layers
import each other."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from proxy.config.sections import Section as _Section


class StoreSettings(_Section):
    url: str = Field(
        "memory://",
        description="memory:// (in-process), redis://, rediss://, redis+sentinel:// or "
        "redis+cluster://.",
    )
    ttl_seconds: int = Field(604800, gt=0, description="Lifetime of a conversation's record.")
    max_checkpoints: int = Field(8, ge=1, description="Checkpoints kept per conversation.")
    max_conversations: int = Field(
        100_000,
        ge=1,
        description="memory://, and the in-process fallback during a Redis outage: "
        "conversations kept (least recently used go).",
    )
    max_listed_conversations: int = Field(
        10_000,
        ge=1,
        description="Conversations per tenant in the admin listing's index (the least recently "
        "used drop out of the listing, not out of the store).",
    )
    encryption_keys: tuple[SecretStr, ...] = Field(
        (),
        description="AES-GCM keys as 'KEYID:BASE64KEY'; the first encrypts, all decrypt. "
        "Empty: values are stored unencrypted.",
    )
    tenant_secret: SecretStr | None = Field(
        None,
        description="Server secret for tenant = HMAC(secret, credential). Null with Redis: one "
        "secret created once in Redis (key cproxy:tenant-secret, no TTL, sealed when "
        "encryption_keys are set) and shared by every replica. Null with memory://: a random "
        "one per process.",
    )
    max_record_bytes: int = Field(
        1024 * 1024,
        ge=4096,
        description="Largest stored value of one conversation: its oldest checkpoints give way "
        "to stay under it; a checkpoint larger on its own is not stored (logged, counted).",
    )
    operation_timeout_seconds: float = Field(
        0.25, gt=0, description="Bound on each store call; slower counts as a store error."
    )
    lock_ttl_seconds: float = Field(
        120, gt=0, description="Lifetime of the single-flight summarization lock."
    )
    max_connections: int = Field(
        64,
        ge=1,
        description="Redis: pooled connections per process (waits are bounded by "
        "operation_timeout_seconds).",
    )
    breaker_failures: int = Field(
        3, ge=1, description="Redis: consecutive failures after which calls skip Redis."
    )
    breaker_cooldown_seconds: float = Field(
        1.0, gt=0, description="Redis: while skipped, how often one call probes whether it is back."
    )

    @model_validator(mode="after")
    def _check_url(self) -> StoreSettings:
        schemes = ("memory://", "redis://", "rediss://", "redis+sentinel://", "redis+cluster://")
        if not self.url.startswith(schemes):
            raise ValueError(f"url must start with one of {', '.join(schemes)}; got {self.url!r}")
        return self


# The headers that name a conversation, in the order they are read. X-Conversation-Id is the
# proxy's own; the others are the per-session headers coding agents already send on every model
# request (captured from Claude Code 2.1.197, Codex CLI 0.171.0, opencode 1.18.33), so an agent
# pointed at the proxy gets one conversation per session with nothing else to set. Codex sends
# ``session-id`` and ``thread-id``: a sub-agent's thread has its own history, so the thread wins.
# opencode sends ``x-session-id`` (and ``session-id``, the same value, on its OpenAI provider).
DEFAULT_CONVERSATION_HEADERS = (
    "X-Conversation-Id",
    "X-Claude-Code-Session-Id",
    "thread-id",
    "session-id",
    "x-session-id",
)


class ConversationSettings(_Section):
    header: tuple[str, ...] = Field(
        DEFAULT_CONVERSATION_HEADERS,
        min_length=1,
        description="Request headers naming the conversation, a name or a list: the first one "
        "present is read. The first is the proxy's own and is not forwarded; the rest (coding "
        "agents' session headers) reach the provider as sent.",
    )
    missing: Literal["passthrough", "auto"] = Field(
        "passthrough",
        description="Without the header: pass through uncompacted, or derive an id from the "
        "tenant, preamble and first user message.",
    )
    credential_header: str | None = Field(
        None,
        description="Header identifying the caller for tenant binding; null: the Authorization "
        "bearer.",
    )

    @field_validator("header", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        # A single name was the only form before the list: files that say so keep working.
        return (value,) if isinstance(value, str) else value

    @property
    def own_header(self) -> str:
        """The proxy's own header (the first): the one taken off what is forwarded."""
        return self.header[0]
