"""The settings sections of the request path: ``server:``, ``upstream:``, ``summarizer:``,
``routes:`` and ``calibration:`` (the YAML contract, docs/configuration.md, generated from here).

Sections are frozen pydantic models; every key has a default and a description. Each part of the
proxy is given only its own section. The sections of operator features are in
``proxy.config.ops``, those of the store and of conversations in ``proxy.config.store``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from proxy.core.policy import REQUEST_MODEL, PolicySettings
from proxy.core.summary_message import check_final_prompt


class Section(BaseModel):
    """A settings section: unknown keys are errors, values frozen, defaults validated too."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class ServerSettings(Section):
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on.")
    max_body_bytes: int = Field(
        32 * 1024 * 1024, gt=0, description="Largest request body accepted; larger is a 413."
    )
    max_messages: int = Field(
        100_000,
        gt=0,
        description="Most messages a compacted chat request may hold; more is a 413 "
        "(requests passed through untouched are not counted).",
    )
    workers: int = Field(1, ge=1, description="uvicorn worker processes.")
    shutdown_grace_seconds: float = Field(
        30, ge=0, description="On SIGTERM, how long in-flight requests and streams may finish."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level of the proxy's own logs."
    )
    access_log: bool = Field(True, description="One structured log line per request.")
    header_timeout_seconds: float = Field(
        10,
        gt=0,
        description="Time a client has to send a request's headers, from its connection or "
        "from the first byte of the next request; slower is a 408 and the connection closed.",
    )
    body_idle_timeout_seconds: float = Field(
        30,
        gt=0,
        description="Longest wait for the next piece of a request body; longer is a 408 (or "
        "the connection closed if a response has started) and nothing reaches the provider.",
    )
    max_header_bytes: int = Field(
        65536,
        ge=1024,
        description="Largest request line plus headers; larger is a 431 and the connection closed.",
    )
    max_connections: int = Field(
        4096,
        ge=1,
        description="Open client connections per worker; more are answered 503 and closed at "
        "once. Lowered at start-up if the open-files limit cannot hold them.",
    )


class Timeouts(Section):
    connect: float = Field(5, gt=0, description="Seconds to open a connection to the provider.")
    read: float = Field(600, gt=0, description="Seconds to wait for each read from the provider.")
    write: float = Field(30, gt=0, description="Seconds to wait for each write to the provider.")
    pool: float = Field(5, gt=0, description="Seconds to wait for a free pooled connection.")


class UpstreamSettings(Section):
    base_url: str = Field(
        "https://api.openai.com/v1",
        description="OpenAI-compatible base URL of the provider, ending with its /v1 (or equivalent).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="When set, replaces the client's Authorization towards the provider; "
        "when null, the client's Authorization is forwarded.",
    )
    anthropic_base_url: str = Field(
        "https://api.anthropic.com",
        description="Base URL of the Anthropic Messages API (as the anthropic SDK's, without /v1): "
        "where /v1/messages and /v1/messages/count_tokens are sent.",
    )
    anthropic_api_key: SecretStr | None = Field(
        None,
        description="When set, replaces the client's x-api-key towards the Anthropic API; "
        "when null, the client's x-api-key is forwarded.",
    )
    timeouts: Timeouts = Field(
        default_factory=Timeouts, description="Timeouts towards the provider."
    )
    transport: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="HTTP client used towards the provider (aiohttp is faster; see the benchmark).",
    )
    max_connections: int = Field(256, ge=1, description="Pooled connections to the provider.")
    keepalive_seconds: float = Field(30, ge=0, description="Idle keep-alive of pooled connections.")
    discover_windows: bool = Field(
        True,
        description="Ask the provider's /models (once per model, in the background) for the "
        "context window of a model the models table does not fix.",
    )
    stream_hold_seconds: float = Field(
        0.5,
        ge=0,
        le=30,
        description="A streamed answer to a request the proxy could compact harder is held at "
        "most this long, until its first event that is not an opening one (response.created, "
        "response.in_progress), to see whether the provider fails it as too long (then it is "
        "rescued). Past it the opening events are relayed, and a later failure reaches the "
        "client as sent. 0: nothing held (no rescue of an in-stream overflow).",
    )

    @model_validator(mode="after")
    def _check_url(self) -> UpstreamSettings:
        for name in ("base_url", "anthropic_base_url"):
            url = getattr(self, name)
            if not re.match(r"^https?://[^/\s]+", url):
                raise ValueError(f"{name} must be an http(s) URL, got {url!r}")
        return self


class SummarizerSettings(Section):
    model: str = Field(
        "gpt-4o-mini",
        description=f"Model that writes summaries; {REQUEST_MODEL}: the model the request names.",
    )
    base_url: str | None = Field(None, description="Null: the upstream's base_url.")
    api_key: SecretStr | None = Field(
        None, description="Null: the upstream api_key, else the caller's own credential."
    )
    timeout_seconds: float = Field(60, gt=0, description="Bound on one summarizer call.")
    max_summary_tokens: int = Field(
        1024,
        gt=0,
        description="max_tokens of a summary call. A summary is kept to twice this plus 1024 "
        "tokens (8 bytes a token), cut with a marker; a summarizer response body is read up to "
        "1 MiB or 6x that, whichever is more.",
    )
    max_input_tokens: int = Field(
        100_000, gt=0, description="Largest transcript one call may take; longer is chunked."
    )
    max_summarized_tokens: int = Field(
        400_000,
        gt=0,
        description="The most of the old turns one summary reads (newest first), so a huge old "
        "message costs at most this divided by max_input_tokens calls; the oldest part beyond "
        "it is left out, and the summary says so (metric proxy_summarizer_omitted_tokens).",
    )
    cod_max_loops: int = Field(
        0, ge=0, description="Chain-of-Density densification loops (0 = off)."
    )
    prompt: str | None = Field(None, description="Prompt for a first summary; null: built-in.")
    update_prompt: str | None = Field(
        None, description="Prompt to extend an existing summary; null: built-in."
    )
    instructions: str | None = Field(
        None, description="Extra instructions appended to either prompt (a language, a focus)."
    )
    final_prompt: str | None = Field(
        None,
        description="The text the summary is framed with in the message sent (LangMem's "
        "final_prompt): {summary} where it goes, some text before it; null: built-in.",
    )
    cached_prefix: Literal["auto", "on", "off"] = Field(
        "auto",
        description="A summary made right after an answer (ahead of time) asks the "
        "conversation's own model, on the body just sent with the instructions after it, so the "
        "provider reads the transcript from its prompt cache (chat completions and Anthropic "
        "Messages; docs/cost.md). auto: where that is cheaper at the two models' prices; on: "
        "always; off: the quoted summarizer only.",
    )
    background_queue: int = Field(
        256, ge=1, description="Ahead-of-time summaries waiting at most; more are dropped."
    )
    background_concurrency: int = Field(
        4, ge=1, description="Ahead-of-time summaries running at once per process."
    )

    @model_validator(mode="after")
    def _check_final_prompt(self) -> SummarizerSettings:
        if self.final_prompt is not None:
            check_final_prompt(self.final_prompt)
        return self

    def for_policy(self, policy: PolicySettings, *, request_model: str) -> SummarizerSettings:
        """These settings with the policy's ``summarizer:`` keys laid over them, and
        ``$request`` resolved to ``request_model``. A policy that names its own ``base_url``
        does not inherit the global ``api_key``: a key goes only where it was configured for."""
        own = policy.summarizer
        update = {k: v for k, v in own if v is not None}
        if own.base_url is not None and own.api_key is None:
            update["api_key"] = None
        merged = self.model_copy(update=update) if update else self
        if merged.model == REQUEST_MODEL:
            merged = merged.model_copy(update={"model": request_model})
        return merged


class RouteMatch(Section):
    model: str | None = Field(None, description="Glob over the request's model name.")
    header: dict[str, str] = Field(default_factory=dict, description="Headers that must match.")
    tenant: str | None = Field(None, description="Tenant id (as shown by the admin API).")


class Route(Section):
    match: RouteMatch = Field(description="What a request must match (all given keys).")
    policy: str = Field(description="Name of the policy (a key of policies) for a match.")


class CalibrationSettings(Section):
    enabled: bool = Field(
        True,
        description="Learn, per model, how the provider's usage.prompt_tokens compares with the "
        "proxy's tiktoken count, and scale windows and token thresholds by it.",
    )
    min_factor: float = Field(
        0.5, gt=0, description="Smallest correction factor (provider tokens per counted token)."
    )
    max_factor: float = Field(2.0, gt=0, description="Largest correction factor.")

    @model_validator(mode="after")
    def _check_range(self) -> CalibrationSettings:
        if not self.min_factor <= 1 <= self.max_factor:
            raise ValueError("min_factor must be at most 1 and max_factor at least 1")
        return self
