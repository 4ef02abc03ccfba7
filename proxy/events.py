"""What happened, told to whoever listens: the one-way road from the request path to operator
features (metrics, hooks, export, the recorder, the access log).

Emitters (server, proxying, compaction, state) know only ``Listeners`` and the event types
here; ``proxy.ops`` subscribes, and the app wires the two together. Nothing on the request
path imports ``proxy.ops`` (docs/architecture.md, "The one-way rule"). A listener must not
block and must not raise: ``Listeners.emit`` logs and drops a listener's failure, because an
operator feature never breaks a user's request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("proxy.events")

Listener = Callable[[Any], None]


class Listeners:
    """Fan-out of events to the listeners subscribed to their type (exact type match)."""

    def __init__(self) -> None:
        self._by_type: dict[type, list[Listener]] = {}

    def subscribe(self, event_type: type, listener: Listener) -> None:
        self._by_type.setdefault(event_type, []).append(listener)

    def wants(self, event_type: type) -> bool:
        """Whether anyone listens for ``event_type`` (so an emitter can skip costly work)."""
        return bool(self._by_type.get(event_type))

    def emit(self, event: object) -> None:
        for listener in self._by_type.get(type(event), ()):
            try:
                listener(event)
            except Exception:  # an operator feature never breaks the request path
                logger.exception("listener for %s failed", type(event).__name__)
