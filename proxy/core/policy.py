"""The policy types the core plans with: triggers, keep, clearing of tool results, a model's window.

Pydantic models, frozen and validated; the YAML loader (``proxy.config.settings``) builds them from the
config file, tests and the evaluation harness build them directly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from proxy.core.conditions import Condition
from proxy.core.pins import check_pin
from proxy.core.summary_message import check_final_prompt
from proxy.core.tool_calls import tool_matches


class PolicyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


NonNegativeInt = Annotated[int, Field(ge=0)]


def _pin_expression(expression: str) -> str:
    try:
        check_pin(expression)  # the same parser and vetting the planner uses
    except ValueError as exc:
        raise ValueError(f"not a valid pin: {exc}") from exc
    return expression


# Vetted one by one, so that a config error names the list item (and its line).
PinExpression = Annotated[str, AfterValidator(_pin_expression)]


class TriggerSettings(PolicyModel):
    input_tokens: NonNegativeInt = Field(0, description="Fire when the input exceeds N tokens.")
    context_fraction: float = Field(
        0.8, ge=0, le=1, description="Fire when the input exceeds this fraction of the window."
    )
    interactions: NonNegativeInt = Field(
        0, description="Fire when more than N interactions came since the last summary."
    )
    interaction_tokens: NonNegativeInt = Field(
        0, description="Fire when those interactions hold more than N tokens."
    )
    messages: NonNegativeInt = Field(
        0, description="Fire when the request has more than N messages."
    )
    on_tool_success: tuple[str, ...] = Field(
        (),
        description="Fire when one of these tools succeeded in a result new in this request; "
        "'Tool(regex)' also needs the regex in the command the call ran (Bash(pytest)).",
    )
    on_tool_error: tuple[str, ...] = Field(
        (),
        description="Fire when one of these tools failed in a result new in this request "
        "('Tool(regex)' as for on_tool_success).",
    )
    tool_error_pattern: str = Field(
        r"(?i)^\s*(error|exception|traceback)\b",
        description=(
            "A tool result matching this regex (or parsing as an error object, or marked an "
            "error by its provider: Anthropic's is_error, also on a call the user rejected) failed."
        ),
    )
    conditions: tuple[str, ...] = Field(
        (),
        description="simpleeval expressions over `message`; only interactions with a message "
        "matching all of them count towards the interaction triggers.",
    )
    pays: bool = Field(
        True,
        description="Also fire when compacting now pays for itself at the model's prices, prompt "
        "caching included (docs/cost.md#deciding-by-price); a model without a price is decided at "
        "pricing.reference (null: never by price).",
    )
    pays_from_tokens: NonNegativeInt = Field(
        20_000,
        description="The price trigger looks only at prompts of at least N tokens: below it a "
        "summary saves cents and may lose detail. It says when compacting is weighed, not how much "
        "is kept: a price-triggered cut in one long agent run keeps about 9.6k tokens verbatim "
        "(30% of 32k, or of N when larger).",
    )

    @model_validator(mode="after")
    def _check_expressions(self) -> TriggerSettings:
        for i, expr in enumerate(self.conditions):
            try:
                Condition(expr)  # the same parser and vetting the planner uses
            except ValueError as exc:
                raise ValueError(f"conditions[{i}] is not a valid condition: {exc}") from exc
        try:
            re.compile(self.tool_error_pattern)
        except re.error as exc:
            raise ValueError(f"tool_error_pattern is not a valid regex: {exc}") from exc
        for key in ("on_tool_success", "on_tool_error"):
            try:
                tool_matches(getattr(self, key))
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from exc
        return self


class KeepSettings(PolicyModel):
    """How much recent context stays verbatim: exactly one of the four.

    ``interactions: 0`` keeps nothing older than the current task: only the latest user message
    and, in an agent run, its newest tool round stay verbatim (the one spelling of "keep nothing";
    ``messages``/``tokens`` of 0 are refused with a pointer to it)."""

    interactions: int | None = Field(
        None, ge=0, description="Keep the last N interactions; 0 keeps only the current task."
    )
    messages: int | None = Field(
        None, ge=1, description="Keep at least N messages (rounded up to a safe cut point)."
    )
    tokens: int | None = Field(
        None, ge=1, description="Keep up to N tokens, walking back by interactions and tool rounds."
    )
    fraction: float | None = Field(
        None, gt=0, le=1, description="Keep up to this fraction of the model's window."
    )
    chat_interactions: int | None = Field(
        None,
        ge=0,
        description="In a conversation with no tool call (a chat), keep its last N interactions "
        "instead of the above: a budget sized for an agent's tool rounds is a dozen chat turns, "
        "written again after every summary.",
    )

    @model_validator(mode="before")
    @classmethod
    def _default(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and not any(
            v is not None for k, v in data.items() if k != "chat_interactions"
        ):
            return {**data, "interactions": 2}
        return data

    @model_validator(mode="before")
    @classmethod
    def _one_spelling_of_nothing(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in ("messages", "tokens", "fraction"):
                if data.get(key) == 0 and not isinstance(data.get(key), bool):
                    raise ValueError(
                        f"{key}: 0 is not a keep; to keep only the current task verbatim, "
                        "write keep: {interactions: 0}"
                    )
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> KeepSettings:
        chosen = [
            k
            for k in ("interactions", "messages", "tokens", "fraction")
            if getattr(self, k) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                f"set exactly one of interactions, messages, tokens, fraction; got {chosen}"
            )
        return self


class ClearToolResultsSettings(PolicyModel):
    older_than_interactions: NonNegativeInt = Field(
        0, description="Stub tool results older than N interactions (0 = off)."
    )
    older_than_rounds: NonNegativeInt = Field(
        0,
        description="Stub tool results with N newer tool rounds after theirs, also inside one "
        "long task (0 = off); either age clears.",
    )
    min_tokens: NonNegativeInt = Field(0, description="Only stub results larger than N tokens.")
    clear_at_least: NonNegativeInt = Field(
        0,
        description="Stub old results only in batches that save at least N tokens, oldest first "
        "(0 = each as soon as it is old). Every new stub moves the prompt's cached prefix; a "
        "batch moves it once for many turns, as Anthropic's clear_at_least does.",
    )


# ``summarizer.model: $request``: summarize with the model the request itself names.
REQUEST_MODEL = "$request"
_INHERIT = " Null: the global summarizer's."


class PolicySummarizer(PolicyModel):
    """A policy's own summarizer: each key set here replaces the global ``summarizer:``'s."""

    model: str | None = Field(
        None, description=f"Model that writes summaries; {REQUEST_MODEL}: the request's.{_INHERIT}"
    )
    base_url: str | None = Field(None, description="OpenAI-compatible base URL." + _INHERIT)
    api_key: SecretStr | None = Field(None, description="Key for base_url." + _INHERIT)
    timeout_seconds: float | None = Field(
        None, gt=0, description="Bound on one summary." + _INHERIT
    )
    max_summary_tokens: int | None = Field(
        None, gt=0, description="max_tokens of a summary call." + _INHERIT
    )
    max_input_tokens: int | None = Field(
        None, gt=0, description="Largest transcript one call may take." + _INHERIT
    )
    max_summarized_tokens: int | None = Field(
        None, gt=0, description="The most of the old turns one summary reads." + _INHERIT
    )
    cod_max_loops: int | None = Field(
        None, ge=0, description="Chain-of-Density refinement passes (0 = off)." + _INHERIT
    )
    prompt: str | None = Field(None, description="Prompt for a first summary." + _INHERIT)
    update_prompt: str | None = Field(
        None, description="Prompt to extend an existing summary." + _INHERIT
    )
    instructions: str | None = Field(
        None, description="Extra instructions appended to either prompt." + _INHERIT
    )
    final_prompt: str | None = Field(
        None,
        description="The text the summary is framed with in the message sent (LangMem's "
        "final_prompt), {summary} where it goes, some text before it." + _INHERIT,
    )
    cached_prefix: Literal["auto", "on", "off"] | None = Field(
        None,
        description="Ask the conversation's own model on the prompt it has cached." + _INHERIT,
    )

    @field_validator("final_prompt")
    @classmethod
    def _check_final_prompt(cls, value: str | None) -> str | None:
        return None if value is None else check_final_prompt(value)


class NativeSettings(PolicyModel):
    """``strategy: native``: the provider's own context management (docs/policies.md, "Native
    compaction"); the trigger, keep and ``clear_tool_results.clear_at_least`` are the policy's."""

    fallback: Literal["summarize", "neuralyze", "trim", "off"] = Field(
        "summarize",
        description="The strategy that runs where the provider offers none (chat completions, "
        "or a model that refused the fields).",
    )
    shadow_summary: bool = Field(
        False,
        description="Also make the proxy's own <agent_summary> of the same turns, stored as a "
        "checkpoint and never sent (readable, exported, used by the overflow rescue).",
    )
    compaction: bool = Field(
        True,
        description="Ask for server-side compaction (Responses compact_threshold, Anthropic's "
        "compact_20260112 edit) at the policy's trigger.",
    )
    clear_tool_uses: bool = Field(
        True, description="Anthropic: clear old tool uses (clear_tool_uses_20250919)."
    )
    exclude_tools: tuple[str, ...] = Field(
        (), description="Anthropic: tools whose uses are never cleared."
    )
    clear_tool_inputs: bool = Field(
        False, description="Anthropic: clear the tool calls' inputs too, not only their results."
    )
    instructions: str | None = Field(
        None, description="Anthropic: extra instructions for the provider's compaction summary."
    )


class PolicySettings(PolicyModel):
    strategy: Literal["summarize", "neuralyze", "trim", "off", "native"] = Field(
        "summarize", description="What to do with old interactions when a trigger fires."
    )
    mode: Literal["ahead", "inline"] = Field(
        "ahead", description="ahead: summarize in the background before the trigger fires."
    )
    soft_fraction: float = Field(
        0.8, gt=0, le=1, description="Fraction of a trigger at which ahead-mode starts a summary."
    )
    ahead_turns: float = Field(
        2,
        ge=0,
        description="ahead: past soft_fraction, start the summary only when the conversation's "
        "measured growth reaches the trigger within this many turns (0: at once).",
    )
    trigger: TriggerSettings = Field(
        default_factory=TriggerSettings,
        description="Thresholds that start a compaction; any one fires, 0 or [] turns one off.",
    )
    keep: KeepSettings = Field(
        default_factory=lambda: KeepSettings(interactions=2),
        description="How much recent context stays verbatim: exactly one of the four keys "
        "(and chat_interactions beside it).",
    )
    clear_tool_results: ClearToolResultsSettings = Field(
        default_factory=ClearToolResultsSettings,
        description="Replace old, large tool results by a short stub (pairs stay whole).",
    )
    pin: tuple[PinExpression, ...] = Field(
        (),
        description="Expressions (the language of trigger conditions, plus tool, calls, turn "
        "and contains()) selecting messages never summarized, cleared or dropped: sent "
        "verbatim, in order, after the summary; a tool round travels whole.",
    )
    window_tokens: NonNegativeInt = Field(0, description="Final hard token budget (0 = none).")
    native: NativeSettings = Field(
        default_factory=NativeSettings,
        description="strategy native: the provider's own compaction, and what runs without it.",
    )
    neuralyze_notice: str | None = Field(
        None, description="neuralyze: an optional fixed notice put where old turns were dropped."
    )
    summarizer: PolicySummarizer = Field(
        default_factory=PolicySummarizer,
        description="This policy's summarizer: keys set here override the global summarizer's.",
    )
    prompt_cache_key: bool = Field(
        True,
        description="OpenAI routes: every request of a conversation the proxy plans carries a "
        "prompt_cache_key derived from the tenant and conversation (never the raw id), from its "
        "first request, when the client sent none.",
    )
    ledger_header: bool = Field(
        False,
        description="Answers carry X-Compaction-Ledger: the conversation's dollars so far (spent, "
        "summarizer, saved against sending direct), up to the previous answer.",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _unquoted_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false; `strategy: off` is what the docs say to write.
        return "off" if value is False else value


class ModelInfo(PolicyModel):
    context_window: int = Field(gt=0, description="Tokens of the model's context window.")
    encoding: str = Field("o200k_base", description="tiktoken encoding name.")
