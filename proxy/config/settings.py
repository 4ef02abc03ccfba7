"""Typed, validated settings: the YAML contract (docs/configuration.md, generated from here).

Settings are read once, at start-up, into frozen pydantic models. Every key has a default and a
description (the configuration reference is generated from them). Errors name the key path and,
when the value came from a file, its line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)

from proxy.config.families import FAMILIES
from proxy.core.policy import (
    REQUEST_MODEL,
    ModelInfo,
    PolicySettings,
)
from proxy.core.summary_message import check_final_prompt
from proxy.errors import ConfigError

CONFIG_PATH_ENV = "COMPACTION_PROXY_CONFIG"
UPSTREAM_URL_ENV = "COMPACTION_PROXY_UPSTREAM_URL"
UPSTREAM_KEY_ENV = "COMPACTION_PROXY_UPSTREAM_API_KEY"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


NonNegativeInt = Annotated[int, Field(ge=0)]


class ServerSettings(_Model):
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


class Timeouts(_Model):
    connect: float = Field(5, gt=0, description="Seconds to open a connection to the provider.")
    read: float = Field(600, gt=0, description="Seconds to wait for each read from the provider.")
    write: float = Field(30, gt=0, description="Seconds to wait for each write to the provider.")
    pool: float = Field(5, gt=0, description="Seconds to wait for a free pooled connection.")


class UpstreamSettings(_Model):
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


class StoreSettings(_Model):
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


class ConversationSettings(_Model):
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


class SummarizerSettings(_Model):
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


class RouteMatch(_Model):
    model: str | None = Field(None, description="Glob over the request's model name.")
    header: dict[str, str] = Field(default_factory=dict, description="Headers that must match.")
    tenant: str | None = Field(None, description="Tenant id (as shown by the admin API).")


class Route(_Model):
    match: RouteMatch = Field(description="What a request must match (all given keys).")
    policy: str = Field(description="Name of the policy (a key of policies) for a match.")


# The built-in table (proxy/config/families.py), checked after the user's `models:`.
DEFAULT_MODELS: dict[str, ModelInfo] = {
    f.glob: ModelInfo(context_window=f.context_window, encoding=f.encoding) for f in FAMILIES
}


class CalibrationSettings(_Model):
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


class AdminSettings(_Model):
    token: SecretStr | None = Field(None, description="Admin API bearer token; null disables it.")
    cross_tenant: bool = Field(
        False, description="Let the admin token read any tenant without the caller's credential."
    )


class RecordSettings(_Model):
    path: str | None = Field(
        None,
        description="Append every chat completion request body (the client's full history, "
        "message content included) to this JSONL file, for `compaction-proxy eval`; null: off.",
    )


class HookSettings(_Model):
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


class JsonlExport(_Model):
    path: str = Field(description="File each new summary is appended to, one JSON line each.")


class RedisStreamExport(_Model):
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


class WebhookExport(_Model):
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


class ExportSettings(_Model):
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


class Settings(_Model):
    server: ServerSettings = Field(
        default_factory=ServerSettings, description="The proxy's own HTTP server."
    )
    upstream: UpstreamSettings = Field(
        default_factory=UpstreamSettings, description="The provider requests are forwarded to."
    )
    store: StoreSettings = Field(
        default_factory=StoreSettings, description="Where conversation checkpoints are kept."
    )
    conversation: ConversationSettings = Field(
        default_factory=ConversationSettings,
        description="How a request names its conversation and its caller.",
    )
    summarizer: SummarizerSettings = Field(
        default_factory=SummarizerSettings, description="The LLM call that writes summaries."
    )
    policies: dict[str, PolicySettings] = Field(
        default_factory=lambda: {"default": PolicySettings()},
        description="Named policies; `default` applies when no header or route picks another.",
    )
    routes: tuple[Route, ...] = Field(
        (), description="Rules choosing a policy by model glob, header or tenant; first match wins."
    )
    models: dict[str, ModelInfo] = Field(
        default_factory=dict,
        description="Model table (glob -> window, encoding); checked before the built-in table.",
    )
    calibration: CalibrationSettings = Field(
        default_factory=CalibrationSettings,
        description="Token counts corrected by the provider's own usage.prompt_tokens.",
    )
    admin: AdminSettings = Field(
        default_factory=AdminSettings, description="The /admin API (inspect, forget, preview)."
    )
    record: RecordSettings = Field(
        default_factory=RecordSettings,
        description="Opt-in recording of chat requests to disk, as transcripts for `eval`.",
    )
    hooks: tuple[HookSettings, ...] = Field(
        (),
        description="Python classes called before a compacted request is sent and after a "
        'summary is made (docs/operations.md, "Hooks").',
    )
    export: ExportSettings = Field(
        default_factory=ExportSettings,
        description="Opt-in: each new summary (message content) written to a JSONL file, a "
        "Redis Stream or a webhook, with its tenant and conversation.",
    )

    @model_validator(mode="after")
    def _check_policies(self) -> Settings:
        if "default" not in self.policies:
            self.policies["default"] = PolicySettings()  # dict is mutable inside a frozen model
        frame = self.summarizer.final_prompt
        for name, policy in self.policies.items():
            # The planner renders the summary with its policy alone: give each policy the
            # global frame unless it has its own.
            if frame is not None and policy.summarizer.final_prompt is None:
                own = policy.summarizer.model_copy(update={"final_prompt": frame})
                self.policies[name] = policy.model_copy(update={"summarizer": own})
        for i, route in enumerate(self.routes):
            if route.policy not in self.policies:
                raise ValueError(f"routes[{i}].policy names an unknown policy {route.policy!r}")
        return self

    def model_table(self) -> dict[str, ModelInfo]:
        """User entries first (first matching glob wins), then the built-in defaults."""
        return {**self.models, **{k: v for k, v in DEFAULT_MODELS.items() if k not in self.models}}


# --- loading -----------------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def _expand_env(value: Any, environ: Mapping[str, str], path: str = "") -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{path or '<root>'}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _expand_env(v, environ, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand_env(v, environ, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _line_index(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML document to its 1-based line, for error messages."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, str(i)))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _format_errors(exc: ValidationError, lines: dict[tuple[str, ...], int], source: str) -> str:
    out = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        key = ".".join(loc) or "<root>"
        where = ""
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                where = f" ({source}, line {lines[loc[:n]]})"
                break
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(f"{key}{where}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(out)


def parse_settings(
    text: str, *, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse YAML text into Settings, applying ${ENV} references and env overrides."""
    environ = os.environ if environ is None else environ
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    data = _expand_env(raw, environ)
    upstream = (
        data.setdefault("upstream", {}) if isinstance(data.get("upstream", {}), dict) else None
    )
    if upstream is not None:
        if environ.get(UPSTREAM_URL_ENV):
            upstream["base_url"] = environ[UPSTREAM_URL_ENV]
        if environ.get(UPSTREAM_KEY_ENV):
            upstream["api_key"] = environ[UPSTREAM_KEY_ENV]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, _line_index(text), source)) from exc


def load_settings(
    path: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> Settings:
    """Load settings from a file (or $COMPACTION_PROXY_CONFIG, or defaults when neither is set)."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_PATH_ENV)
    if not path:
        return parse_settings("", source="<defaults>", environ=environ)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    return parse_settings(text, source=str(path), environ=environ)


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, secrets shown as '***'."""

    def mask(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***"
        if isinstance(value, BaseModel):
            fields = type(value).model_fields
            return {f.alias or k: mask(getattr(value, k)) for k, f in fields.items()}
        if isinstance(value, dict):
            return {k: mask(v) for k, v in value.items()}
        if isinstance(value, tuple | list):
            return [mask(v) for v in value]
        return value

    return mask(settings)
