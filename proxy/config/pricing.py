"""The ``pricing:`` section: dollars per million tokens, per model glob.

The proxy prices what each response says the provider billed (the per-conversation ledger) and
weighs a compaction's one-time cost against what it saves (the price-aware decision). A built-in
table of the common model families (``proxy.economics.prices``, dated: prices change) answers
for the models no entry here names; ``models`` overrides it, ``default`` prices the rest.

    pricing:
      models:
        "gpt-4.1*": {input: 2.0, cached_input: 0.5, output: 8.0}
        "my-claude-proxy*": {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0}
      default: {input: 1.0, cached_input: 0.25, output: 4.0}
      reference: {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0}

``reference`` is what the price trigger assumes for a model that stays unpriced (a local model, a
gateway's alias): whether a compaction pays depends mostly on the ratios (a cached read a tenth
of input, a cache write 1.25x, a summarizer cheaper than the model), so a typical agent model's
prices let it compact about when a priced model would. It is never billed: the ledger still
counts that model as unpriced ($0).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy.config.sections import Section


class ModelPrice(Section):
    """One model's prices in dollars per million tokens. Where the provider bills no discount
    or no write fee, leave ``cached_input`` or ``cache_write`` null: the input price."""

    input: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Dollars per million input tokens read from no cache (billed in full).",
    )
    cached_input: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="Dollars per million input tokens read from the provider's prompt cache "
        "(OpenAI: a quarter to a tenth of input; Anthropic: a tenth); null: the input price.",
    )
    cache_write: float | None = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="Dollars per million input tokens written to the prompt cache (Anthropic's "
        "5-minute cache: 1.25x input); null: the input price (OpenAI bills no write fee).",
    )
    output: float = Field(
        ge=0, allow_inf_nan=False, description="Dollars per million output tokens."
    )

    @field_validator("input", "cached_input", "cache_write", "output", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        # YAML reads `yes`/`no`/`true` as booleans, which pydantic would take as 1 and 0.
        if isinstance(value, bool):
            raise ValueError("must be a number of dollars, not a boolean")
        return value


class PricingSettings(Section):
    models: dict[str, ModelPrice] = Field(
        default_factory=dict,
        description="Prices by model glob (fnmatch, case-insensitive; a gateway prefix such as "
        "`openai/` is also tried without it); checked in order before the built-in table of "
        "model families (proxy/economics/prices.py, dated), the first matching glob wins.",
    )
    default: ModelPrice | None = Field(
        None,
        description="Prices of a model that neither `models` nor the built-in table names; "
        "null: such a model is unpriced (0 dollars, flagged as unpriced in the ledger; the price "
        "trigger assumes `reference`). Either way a warning is logged once per model.",
    )
    reference: ModelPrice | None = Field(
        default_factory=lambda: ModelPrice(
            input=3.0, cached_input=0.3, cache_write=3.75, output=15.0
        ),
        description="Prices the price trigger (trigger.pays) assumes for a model that stays "
        "unpriced, to decide when compacting pays; never billed (the ledger counts the model "
        "as unpriced). Default: Claude Sonnet's (a 200k agent model; a cached read 0.1x and a "
        "cache write 1.25x of input, the ratios where compacting pays last). null: an unpriced "
        "model compacts on its token thresholds only (80% of the window by default).",
    )
