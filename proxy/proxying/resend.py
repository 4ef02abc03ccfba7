"""A call made on a request's behalf to the same provider endpoint: a summary asked on the
prompt the provider has just cached (``proxy.compaction.summaries.prefix_summary``).

It goes to the request's own upstream URL with the caller's credential headers as the provider
got them (the proxy's key in place of the caller's when it holds one) and the API's version
headers, nothing else of the client's: no tracing, idempotency or custom headers ride along on a
call the client did not make. The answer is read whole, bounded, and decoded; a status of 400 or
more, a timeout or a connection failure is a ProxyError, which the summary turns into a fallback
to the quoted summarizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.errors import UpstreamUnavailable
from proxy.proxying.targets import Target
from proxy.types import HeaderView, RawHeaders
from proxy.upstream.base import UpstreamClient
from proxy.upstream.content_coding import decoded

# What of the request's upstream headers a call on its behalf keeps (lower-case).
_KEPT = frozenset(
    {
        b"authorization",
        b"api-key",
        b"x-api-key",
        b"anthropic-version",
        b"anthropic-beta",
        b"openai-organization",
        b"openai-project",
    }
)
MAX_ANSWER_BYTES = 4 << 20  # a summary's answer; a runaway one is refused past this


@dataclass(frozen=True)
class Resend:
    """POSTs a body to one request's upstream URL with its credential headers."""

    _client: UpstreamClient
    _url: str
    _target: Target
    _request_headers: HeaderView  # read only if a call is made (most requests make none)

    def headers(self) -> RawHeaders:
        """The request's upstream credential and version headers, and this call's own."""
        upstream = self._target.headers(self._request_headers, drop_content_length=True)
        return [
            *((n, v) for n, v in upstream if n.lower() in _KEPT),
            (b"content-type", b"application/json"),
            (b"accept-encoding", b"gzip, deflate"),
        ]

    async def __call__(self, body: bytes) -> bytes:
        """The decoded body of the provider's 2xx answer; ProxyError otherwise."""
        response = await self._client.send("POST", self._url, self.headers(), body)
        try:
            if response.status >= 400:
                raise UpstreamUnavailable(f"the provider answered HTTP {response.status}")
            raw = bytearray()
            async for chunk in response.iter_raw():
                raw += chunk
                if len(raw) > MAX_ANSWER_BYTES:
                    raise UpstreamUnavailable(f"the answer is over {MAX_ANSWER_BYTES} bytes")
            answer = decoded(bytes(raw), response.headers, limit=MAX_ANSWER_BYTES)
            if not answer:
                raise UpstreamUnavailable("the answer could not be decoded")
            return answer
        finally:
            await response.aclose()
