"""What compaction knows of a model: its window in counted tokens, and what each answer teaches.

The window comes from ``ModelWindows`` (config, learned, discovered or built-in) divided by the
model's calibration factor (``Calibration``), so that every threshold measured against it is in
the tokens the proxy counts. An answer teaches one of the two: an overflow answer may state the
window, a successful one reports the prompt's tokens as the provider counted them.
"""

from __future__ import annotations

from proxy.compaction.models.calibration import Calibration, effective_window, prompt_tokens
from proxy.compaction.models.windows import ModelWindows
from proxy.core.policy import ModelInfo

_MAX_INFOS = 4096  # windows change slowly; bounded anyway


class ModelInfos:
    """Model infos for the planner, cached by (window, encoding), and learning from answers."""

    def __init__(self, windows: ModelWindows, calibration: Calibration) -> None:
        self.windows = windows
        self.calibration = calibration
        self._infos: dict[tuple[int, str], ModelInfo] = {}

    def info(self, model: str) -> ModelInfo | None:
        """The model's window (config, learned, discovered or built-in) in counted tokens; None
        while it is unknown."""
        window = self.windows.resolve(model)
        if window.context_window is None:
            return None
        tokens = effective_window(window.context_window, self.calibration.factor(model))
        key = (tokens, window.encoding)
        info = self._infos.get(key)
        if info is None:
            if len(self._infos) >= _MAX_INFOS:
                self._infos.clear()
            info = self._infos[key] = ModelInfo(context_window=tokens, encoding=window.encoding)
        return info

    def learn(self, model: str, *, counted: int, status: int, body: bytes) -> None:
        """What the provider's answer teaches (``body``: decoded; its end, or an overflow
        answer's error): a window (overflow), or a count's correction (``counted``: the tokens
        the proxy counted in what it sent)."""
        if status >= 400:
            self.windows.learn(model, status, body)
        elif status == 200:
            self.calibration.observe(model, counted=counted, reported=prompt_tokens(body))
