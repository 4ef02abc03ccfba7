"""The state package's settings sections: ``store:`` and ``conversation:`` (the YAML contract,
docs/configuration.md). The root ``proxy.config.settings.Settings`` holds them; the store and the
tenancy are given only their own section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

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


class ConversationSettings(_Section):
    header: str = Field("X-Conversation-Id", description="Request header naming the conversation.")
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
