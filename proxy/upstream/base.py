"""The upstream interface: send one request, get status, headers and a raw byte stream back.

Raw means as the provider sent it: compressed bodies stay compressed (their Content-Encoding is
passed on), so nothing is ever decoded twice. Implementations map their own exceptions into
``UpstreamUnavailable`` (502) and ``UpstreamTimeout`` (504), including errors raised mid-stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from proxy.types import RawHeaders

Body = bytes | AsyncIterable[bytes] | None


class UpstreamResponse(Protocol):
    status: int
    headers: RawHeaders

    def iter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk by chunk, undecoded."""
        ...

    async def read(self) -> bytes:
        """The whole (raw) body; for small bodies such as errors."""
        ...

    async def aclose(self) -> None:
        """Release the connection; an unfinished body closes it instead of pooling it."""
        ...


class UpstreamClient(Protocol):
    async def send(
        self, method: str, url: str, headers: RawHeaders, body: Body
    ) -> UpstreamResponse:
        """Send a request; return once the response status and headers have arrived."""
        ...

    async def aclose(self) -> None: ...
