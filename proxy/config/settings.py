"""The root of the settings: one YAML file, read once at start-up (docs/configuration.md).

``Settings`` is assembled from the section models of this package (``proxy.config.sections`` for
the request path, ``proxy.config.ops`` for operator features, ``proxy.config.pricing`` for prices,
``proxy.config.recall`` for recall, ``proxy.config.store`` for the store and conversations) and
core's ``PolicySettings``; each part of the proxy is given only its own section.
``load_settings`` / ``parse_settings`` read a file through ``proxy.config.loading`` (``${ENV}``
references, errors naming the key path and line) and apply the environment overrides.

The sections are re-exported here so that ``from proxy.config.settings import StoreSettings``
keeps working while callers move to the sections' own modules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from proxy.config.dump import masked_dump
from proxy.config.loading import read_yaml, validate
from proxy.config.models import DEFAULT_MODELS, model_table
from proxy.config.ops import (
    AdminSettings,
    ExportSettings,
    HookSettings,
    JsonlExport,
    RecordSettings,
    RedisStreamExport,
    WebhookExport,
)
from proxy.config.pricing import ModelPrice, PricingSettings
from proxy.config.recall import RecallSettings
from proxy.config.sections import (
    CalibrationSettings,
    Route,
    RouteMatch,
    Section,
    ServerSettings,
    SummarizerSettings,
    Timeouts,
    UpstreamSettings,
)
from proxy.config.store import ConversationSettings, StoreSettings
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.errors import ConfigError

__all__ = [
    "CONFIG_PATH_ENV",
    "DEFAULT_MODELS",
    "UPSTREAM_KEY_ENV",
    "UPSTREAM_URL_ENV",
    "AdminSettings",
    "CalibrationSettings",
    "ConversationSettings",
    "ExportSettings",
    "HookSettings",
    "JsonlExport",
    "ModelPrice",
    "PricingSettings",
    "RecordSettings",
    "RedisStreamExport",
    "Route",
    "RouteMatch",
    "ServerSettings",
    "Settings",
    "StoreSettings",
    "SummarizerSettings",
    "Timeouts",
    "UpstreamSettings",
    "WebhookExport",
    "load_settings",
    "masked_dump",
    "parse_settings",
]

CONFIG_PATH_ENV = "COMPACTION_PROXY_CONFIG"
UPSTREAM_URL_ENV = "COMPACTION_PROXY_UPSTREAM_URL"
UPSTREAM_KEY_ENV = "COMPACTION_PROXY_UPSTREAM_API_KEY"


class Settings(Section):
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
    pricing: PricingSettings = Field(
        default_factory=PricingSettings,
        description="Dollars per million tokens by model: what the ledger counts as spent and "
        "saved, and what price-aware compaction weighs (overrides a built-in, dated table).",
    )
    recall: RecallSettings = Field(
        default_factory=RecallSettings,
        description="What compaction removed, kept for the model to fetch back with a tool the "
        "proxy answers itself (docs/recall.md).",
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

    @field_validator("policies")
    @classmethod
    def _complete_policies(
        cls, policies: dict[str, PolicySettings], info: ValidationInfo
    ) -> dict[str, PolicySettings]:
        """The policies as the planner needs them: a ``default`` one always, and each given the
        global summary frame unless it has its own (the planner renders the summary with its
        policy alone). A new dict: the section is frozen, nothing in it is edited."""
        summarizer = info.data.get("summarizer")  # absent when that section was invalid
        frame = summarizer.final_prompt if summarizer is not None else None
        completed = dict(policies)
        if "default" not in completed:
            completed["default"] = PolicySettings()
        return {name: _framed(policy, frame) for name, policy in completed.items()}

    @model_validator(mode="after")
    def _check_routes(self) -> Settings:
        for i, route in enumerate(self.routes):
            if route.policy not in self.policies:
                raise ValueError(f"routes[{i}].policy names an unknown policy {route.policy!r}")
        return self

    def model_table(self) -> dict[str, ModelInfo]:
        """User entries first (first matching glob wins), then the built-in defaults."""
        return model_table(self.models)


def _framed(policy: PolicySettings, frame: str | None) -> PolicySettings:
    """``policy`` with the global summary frame, unless it has its own (or there is none)."""
    if frame is None or policy.summarizer.final_prompt is not None:
        return policy
    own = policy.summarizer.model_copy(update={"final_prompt": frame})
    return policy.model_copy(update={"summarizer": own})


def parse_settings(
    text: str, *, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse YAML text into Settings, applying ${ENV} references and env overrides."""
    environ = os.environ if environ is None else environ
    data = read_yaml(text, source=source, environ=environ)
    upstream = (
        data.setdefault("upstream", {}) if isinstance(data.get("upstream", {}), dict) else None
    )
    if upstream is not None:
        if environ.get(UPSTREAM_URL_ENV):
            upstream["base_url"] = environ[UPSTREAM_URL_ENV]
        if environ.get(UPSTREAM_KEY_ENV):
            upstream["api_key"] = environ[UPSTREAM_KEY_ENV]
    return validate(Settings, data, text=text, source=source)


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
