"""Token counts calibrated against the provider's own: a per-model correction factor.

tiktoken counts what OpenAI models see; a Llama, Qwen or Claude tokenizer cuts the same text
into more (or fewer) tokens, so a threshold of "80% of a 32k window" would fire late (or early).
After each compacted response the provider's ``usage.prompt_tokens`` (``usage.input_tokens``
for the Responses API) is compared with the
proxy's count of exactly what it sent; the ratio (provider tokens per counted token) is smoothed
into a per-model factor, bounded by ``calibration.min_factor`` and ``max_factor``. The proxy keeps
counting with tiktoken and instead divides what it compares counts with: the model's window and
the policy's token thresholds and budgets (``effective_window``, ``calibrated_policy``).

The response is never buffered or re-encoded for this: the forwarder keeps the last few KB of
the bytes as they are relayed (``proxy.proxying.responses.ResponseTail``: usage sits at the end
of a JSON body, and in the last SSE events when ``stream_options.include_usage`` is set), and
the number is read once it has ended.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from proxy.compaction.events import CalibrationSampled
from proxy.config.settings import CalibrationSettings
from proxy.core.policy import PolicySettings
from proxy.events import Listeners

MIN_TOKENS = 256  # smaller prompts are mostly fixed overhead: their ratio says little
OUTLIER = 2.0  # a sample beyond [min_factor / 2, max_factor * 2] is a misreading, ignored
SMOOTHING = 0.2  # weight of a new sample once a model has a few (a mean before that)
MAX_MODELS = 1024

# Chat completions report ``prompt_tokens``, the Responses API ``input_tokens`` (cached ones
# included, as with prompt_tokens); ``input_tokens_details`` does not match (a quote follows).
_PROMPT_TOKENS = re.compile(rb'"(?:prompt|input)_tokens"\s*:\s*(\d+)')
_USED = CalibrationSampled("used")
_IGNORED = CalibrationSampled("ignored")


def prompt_tokens(tail: bytes) -> int | None:
    """The last ``"prompt_tokens": N`` (or ``"input_tokens": N``) of a response's end. Text
    inside a JSON string cannot match: its quotes are escaped."""
    found = _PROMPT_TOKENS.findall(tail)
    return int(found[-1]) if found else None


class Calibration:
    """Per-model factors: provider prompt tokens per token the proxy counted."""

    def __init__(
        self,
        settings: CalibrationSettings,
        *,
        listeners: Listeners | None = None,
    ) -> None:
        self.settings = settings
        self._factors: OrderedDict[str, tuple[float, int]] = OrderedDict()  # (factor, samples)
        self._listeners = listeners or Listeners()
        # (id(policy), factor) -> (policy, its calibrated copy); policies live as long as the
        # settings, so their id is a cheap key (hashing a policy is not).
        self._policies: dict[tuple[int, float], tuple[PolicySettings, PolicySettings]] = {}

    def factor(self, model: str) -> float:
        found = self._factors.get(model)
        return found[0] if found is not None and self.settings.enabled else 1.0

    def policy(self, policy: PolicySettings, model: str) -> PolicySettings:
        """``policy`` calibrated for ``model`` (the factor rounded to 0.01, so a handful of
        copies serve every request)."""
        factor = round(self.factor(model), 2)
        if factor == 1.0:
            return policy
        key = (id(policy), factor)
        found = self._policies.get(key)
        if found is None or found[0] is not policy:
            if len(self._policies) >= 256:
                self._policies.clear()
            found = self._policies[key] = (policy, calibrated_policy(policy, factor))
        return found[1]

    def factors(self) -> dict[str, float]:
        return {m: f for m, (f, _) in self._factors.items()}

    def observe(self, model: str, *, counted: int, reported: int | None) -> bool:
        """Fold one response's usage into ``model``'s factor; False when it was not used."""
        s = self.settings
        if not s.enabled or reported is None or counted < MIN_TOKENS or not model:
            self._listeners.emit(_IGNORED)
            return False
        sample = reported / counted
        if not s.min_factor / OUTLIER <= sample <= s.max_factor * OUTLIER:
            self._listeners.emit(_IGNORED)
            return False
        factor, n = self._factors.get(model, (1.0, 0))
        weight = max(SMOOTHING, 1 / (n + 1))  # the mean of the first samples, then an EMA
        factor = min(max(factor + weight * (sample - factor), s.min_factor), s.max_factor)
        self._factors[model] = (factor, n + 1)
        self._factors.move_to_end(model)
        while len(self._factors) > MAX_MODELS:
            self._factors.popitem(last=False)
        self._listeners.emit(_USED)
        return True


def effective_window(window: int, factor: float) -> int:
    """The window in counted tokens: a provider counting 1.3x sees 1.3x fewer fit."""
    return max(1, int(window / factor))


def calibrated_policy(policy: PolicySettings, factor: float) -> PolicySettings:
    """``policy`` with its token thresholds and budgets in counted tokens."""

    def scale(tokens: int | None) -> int | None:
        return max(1, int(tokens / factor)) if tokens else tokens

    trigger = policy.trigger.model_copy(
        update={
            "input_tokens": scale(policy.trigger.input_tokens),
            "interaction_tokens": scale(policy.trigger.interaction_tokens),
        }
    )
    keep = policy.keep.model_copy(update={"tokens": scale(policy.keep.tokens)})
    return policy.model_copy(
        update={"trigger": trigger, "keep": keep, "window_tokens": scale(policy.window_tokens)}
    )
