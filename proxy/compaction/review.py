"""The one look an operator's code may take at a plan before it is sent, and change it.

``PlanReview`` is implemented outside compaction (``proxy.ops.hooks``: the ``before_send``
hooks) and given to the compactor by the app, so compaction never imports operator features;
the app gives none when no hook looks at plans, and a plan then goes out as it is.
"""

from __future__ import annotations

from typing import Protocol

from proxy.compaction.conversation import Conversation
from proxy.core.plan import Plan


class PlanReview(Protocol):
    async def before_send(self, conv: Conversation, current: Plan) -> Plan:
        """``current`` as it should be sent (the same plan when nothing changes)."""
        ...
