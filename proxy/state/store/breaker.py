"""A circuit breaker: after repeated failures, skip the backend for a while instead of waiting.

Closed: calls go through. After ``failures`` consecutive failures it opens: calls are skipped
(the caller falls back) so a dead Redis costs nothing per request instead of a timeout. Every
``cooldown`` seconds one call is let through as a probe; its success closes the breaker again, so
recovery needs no operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

BreakerState = Literal["closed", "open"]


class CircuitBreaker:
    def __init__(
        self,
        *,
        failures: int = 3,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._threshold = failures
        self._cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._next_probe = 0.0

    @property
    def state(self) -> BreakerState:
        return "open" if self._failures >= self._threshold else "closed"

    def allow(self) -> bool:
        """Whether a call may go to the backend now (a probe, when open and the cooldown passed)."""
        if self._failures < self._threshold:
            return True
        now = self._clock()
        if now >= self._next_probe:
            # One probe per cooldown: a probe that hangs until its timeout never lets a crowd in.
            self._next_probe = now + self._cooldown
            return True
        return False

    def record_success(self) -> None:
        self._failures = 0

    def record_failure(self) -> None:
        self._failures += 1
        if self._failures >= self._threshold:
            self._next_probe = max(self._next_probe, self._clock() + self._cooldown)
