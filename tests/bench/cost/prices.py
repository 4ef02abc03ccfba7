"""Price models: dollars per million tokens of each kind, from the providers' public prices.

Read on 2026-11-24 in stored copies of these pages (their own dates where they give one); prices
change, so the bench's figures are ratios to sending direct priced the same way, which move far
less than the prices do.

- gpt-4.1: input $2.00, cached input $0.50, output $8.00 (github/docs
  data/tables/copilot/models-and-pricing.yml; the cached price also in OpenAI's cookbook
  "Prompt Caching 201", 2.2).
- gpt-5: input $1.25, cached input $0.125, output $10.00 (the openai-cost crate's table,
  "openai.com/api/pricing as of 2026-Q2"; the 90% cache discount of the GPT-5 family also in
  adk-model's openai/pricing.rs, March 2026).
- Claude Sonnet 4.5: input $3, 5-minute cache write $3.75 (1.25x), cache hit $0.30, output $15
  (docs.claude.com build-with-claude/prompt-caching, "Pricing").

- gpt-4o-mini (the summarizer the shipped configs name): input $0.15, cached input $0.075,
  output $0.60 (simonw/llm-prices data/openai.json, as the proxy's own table cites it).

OpenAI bills no cache write before the GPT-5.6 family (developers.openai.com guides/
prompt-caching): written tokens cost what input costs. Every call of a run is priced with the
same model, the summarizer's too: the bench's summarizer stands for the conversation's own model
(a cheaper summarizer model would cost less; that is a setting, not a measurement).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.bench.cost.caching import Usage

PER_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class PriceModel:
    name: str
    input: float
    cached_input: float
    cache_write: float
    output: float

    def cost(self, usage: Usage, output_tokens: int) -> float:
        """Dollars for one request billed as ``usage`` with ``output_tokens``."""
        return (
            usage.uncached * self.input
            + usage.cached * self.cached_input
            + usage.written * self.cache_write
            + output_tokens * self.output
        ) / PER_MILLION


PRICE_MODELS = (
    PriceModel("gpt-4.1", input=2.00, cached_input=0.50, cache_write=2.00, output=8.00),
    PriceModel("gpt-5", input=1.25, cached_input=0.125, cache_write=1.25, output=10.00),
    PriceModel("sonnet-4.5", input=3.00, cached_input=0.30, cache_write=3.75, output=15.00),
)
# The summarizer of config/proxy.yaml and the recipes: what their summaries cost when the bench
# runs the proxy as users do (``as_users``).
GPT_4O_MINI = PriceModel(
    "gpt-4o-mini", input=0.15, cached_input=0.075, cache_write=0.15, output=0.60
)
