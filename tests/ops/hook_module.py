"""Hook classes for the hook tests, named in the proxy's config as ``tests.ops.hook_module:X``.

Each records what it was shown as JSON lines in the file ``record`` names, so a test (in another
thread than the proxy) reads what the hook saw.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.ops.export.exporter import SummaryEvent
from proxy.ops.hooks import OutgoingRequest


class _Recording:
    def __init__(self, record: str) -> None:
        self.record = record

    def write(self, entry: dict[str, Any]) -> None:
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


class Tagger(_Recording):
    """Appends ``tag`` to the newest user message sent; records both stages."""

    def __init__(self, record: str, tag: str) -> None:
        super().__init__(record)
        self.tag = tag

    async def before_send(self, request: OutgoingRequest) -> list[dict[str, Any]]:
        self.write(
            {
                "stage": "before_send",
                "tenant": request.tenant,
                "conversation_id": request.conversation_id,
                "policy": request.policy,
                "model": request.model,
                "dialect": request.dialect,
                "checkpoint": request.checkpoint,
                "messages": len(request.messages),
            }
        )
        last = [m for m in request.messages if m["role"] == "user"][-1]
        last["content"] = f"{last['content']}{self.tag}"
        return request.messages

    async def after_summary(self, event: SummaryEvent) -> None:
        self.write({"stage": "after_summary", **event.payload()})


class Raises:
    """Fails at both stages, with message content in its exception (never to be logged)."""

    async def before_send(self, request: OutgoingRequest) -> None:
        raise RuntimeError(f"cannot handle {request.messages[-1]['content']}")

    async def after_summary(self, event: SummaryEvent) -> None:
        raise RuntimeError(f"cannot handle {event.checkpoint.summary}")


class Sleeps:
    """Never answers within any reasonable budget."""

    async def before_send(self, request: OutgoingRequest) -> None:
        await asyncio.sleep(60)


class Garbage:
    """Returns something that is not a list of messages, after wrecking its copy."""

    async def before_send(self, request: OutgoingRequest) -> object:
        request.messages.clear()
        return [{"no": "role"}]


class NoMethods:
    """Defines neither stage: refused at start-up."""


class Observer:
    """Looks and changes nothing."""

    async def before_send(self, request: OutgoingRequest) -> list[dict[str, Any]]:
        return request.messages
