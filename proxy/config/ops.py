"""The settings sections of operator features (``proxy.ops``): ``admin:``, ``record:``,
``hooks:`` and ``export:`` (the YAML contract, docs/configuration.md, generated from here).

They live in ``proxy.config`` rather than beside their owners because the root settings may not
import ``proxy.ops`` (nothing but the app and the command line does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, model_validator

from proxy.config.sections import Section


class AdminSettings(Section):
    token: SecretStr | None = Field(None, description="Admin API bearer token; null disables it.")
    cross_tenant: bool = Field(
        False, description="Let the admin token read any tenant without the caller's credential."
    )


class RecordSettings(Section):
    path: str | None = Field(
        None,
        description="Append every chat completion request body (the client's full history, "
        "message content included) to this JSONL file, for `compaction-proxy eval`; null: off.",
    )


class HookSettings(Section):
    """One hook class (docs/operations.md, "Hooks"); any other key of the entry is passed to
    its constructor as a keyword argument."""

    class_path: str = Field(
        alias="class",
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="'package.module:ClassName', importable by the proxy.",
    )
    timeout_seconds: float = Field(
        1.0,
        gt=0,
        description="Time budget of each call; slower counts as a failure and the request "
        "goes on as if the hook were absent.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the class's constructor; any other key of the entry "
        "is added to them.",
    )

    @model_validator(mode="before")
    @classmethod
    def _options(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        known = {"class", "timeout_seconds", "options"}
        extra = {k: v for k, v in data.items() if k not in known}
        if not extra:
            return data
        kept = {k: v for k, v in data.items() if k in known}
        return {**kept, "options": {**dict(data.get("options") or {}), **extra}}


class JsonlExport(Section):
    path: str = Field(description="File each new summary is appended to, one JSON line each.")


class RedisStreamExport(Section):
    url: str = Field(description="redis:// or rediss:// URL of the Redis holding the stream.")
    stream: str = Field("compaction:summaries", description="Stream key (XADD).")
    maxlen: int = Field(
        100_000, ge=1, description="Entries kept (XADD MAXLEN ~): the oldest go first."
    )

    @model_validator(mode="after")
    def _check_url(self) -> RedisStreamExport:
        if not self.url.startswith(("redis://", "rediss://")):
            raise ValueError(f"url must start with redis:// or rediss://; got {self.url!r}")
        return self


class WebhookExport(Section):
    url: str = Field(
        pattern=r"^https?://[^/\s]+", description="http(s) URL each new summary is POSTed to."
    )
    secret: SecretStr = Field(
        description="Key of the HMAC-SHA256 signature of each body, sent in "
        "X-Compaction-Signature (docs/operations.md shows how to check it)."
    )
    timeout_seconds: float = Field(5, gt=0, description="Bound on one POST.")
    max_attempts: int = Field(
        6, ge=1, description="Tries per summary (retried on 5xx, 429 and connection errors)."
    )
    backoff_seconds: float = Field(
        0.5, gt=0, description="Wait before the first retry; doubled each retry."
    )
    max_backoff_seconds: float = Field(30, gt=0, description="Longest wait between retries.")


class ExportSettings(Section):
    jsonl: JsonlExport | None = Field(None, description="Append each new summary to a file.")
    redis_stream: RedisStreamExport | None = Field(
        None, description="Add each new summary to a Redis Stream."
    )
    webhook: WebhookExport | None = Field(
        None, description="POST each new summary, signed, retried with backoff."
    )
    queue: int = Field(
        1000,
        ge=1,
        description="Summaries waiting per sink; more are dropped (and counted), never waited for.",
    )
