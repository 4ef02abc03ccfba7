"""What the routes tell operator features, through ``proxy.events.Listeners`` (the app
subscribes ``proxy.ops``: metrics count finished requests, the recorder keeps request bodies)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from proxy.dialects.base import Dialect
from proxy.types import HeaderView


@dataclass(frozen=True)
class RequestRead:
    """A compacted route read a request body whose dialect ``records`` (emitted only while
    someone listens: reading the body whole is the price)."""

    headers: HeaderView
    raw: bytes  # the body exactly as the client sent it
    dialect: Dialect

    @cached_property
    def body(self) -> dict[str, Any]:
        """The parsed body; raises InvalidRequest (a ProxyError) when it is not one."""
        body: dict[str, Any] = self.dialect.parse(self.raw).value  # a dialect parses objects
        return body


@dataclass(frozen=True)
class RequestFinished:
    """A proxied request ended, however it ended."""

    route: str  # the dialect's name, or "passthrough"
    status: int  # as the access log tells it (499: the client left before any status)
    upstream_seconds: float | None  # until the provider's response headers; None: no answer
    cut_off: bool  # the provider failed after the headers were relayed
    added_seconds: float | None = None  # from its arrival until sent upstream; None: not sent
