"""The provider client on httpx: the reference implementation, and what respx tests mock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from proxy.config.settings import UpstreamSettings
from proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from proxy.types import RawHeaders
from proxy.upstream.base import Body


def _map_error(exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout("the provider did not answer in time", code="upstream_timeout")
    return UpstreamUnavailable(
        f"the provider could not be reached ({type(exc).__name__})", code="upstream_unavailable"
    )


class HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers: RawHeaders = list(response.headers.raw)

    async def iter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise _map_error(exc) from exc

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_raw()])

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    @classmethod
    def from_settings(
        cls, settings: UpstreamSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> HttpxUpstream:
        t = settings.timeouts
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
            limits=httpx.Limits(
                max_connections=settings.max_connections,
                max_keepalive_connections=settings.max_connections,
                keepalive_expiry=settings.keepalive_seconds,
            ),
            follow_redirects=False,
            trust_env=False,
            transport=transport,
        )
        return cls(client)

    async def send(self, method: str, url: str, headers: RawHeaders, body: Body) -> HttpxResponse:
        # Built directly, not via client.build_request: that would merge httpx's default
        # headers (User-Agent, Accept-Encoding) into what the client sent.
        request = httpx.Request(method, url, headers=headers, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _map_error(exc) from exc
        return HttpxResponse(response)

    async def aclose(self) -> None:
        await self._client.aclose()
