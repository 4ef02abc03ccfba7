"""The model table: the user's ``models:`` first (first matching glob wins), then the built-in
families (``proxy.config.families``)."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.config.families import FAMILIES
from proxy.core.policy import ModelInfo

# The built-in table (proxy/config/families.py), checked after the user's `models:`.
DEFAULT_MODELS: dict[str, ModelInfo] = {
    f.glob: ModelInfo(context_window=f.context_window, encoding=f.encoding) for f in FAMILIES
}


def model_table(models: Mapping[str, ModelInfo]) -> dict[str, ModelInfo]:
    """User entries first (first matching glob wins), then the built-in defaults."""
    return {**models, **{k: v for k, v in DEFAULT_MODELS.items() if k not in models}}
