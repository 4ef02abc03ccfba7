"""A provider's content codings: reading an answer it compressed, and asking only for codings the
proxy can read where it must read the answer.

Every answer is relayed as the provider sent it: a compressed body stays compressed and keeps its
Content-Encoding (proxy/upstream/base.py). Some answers the proxy also reads, from a copy on the
side: an error that may say the prompt is too long (overflow.py), the window it states
(windows.py), the usage at the end of a response (calibration.py), a ``/models`` listing. Every
official SDK sends ``Accept-Encoding: gzip, deflate`` and providers do compress JSON, so those
reads go through a ``Decoder``.

The standard library reads gzip and deflate; brotli and zstd would each need a dependency, and
clients built on fetch (Node) or reqwest accept them. So a request whose answer the proxy reads
asks the provider only for the codings the client accepts that the proxy can read
(``readable_accept_encoding``): the client still gets a compressed answer, in a coding it asked
for. A provider that answers in another coding anyway is relayed unread, as one that says nothing.
"""

from __future__ import annotations

import zlib

from proxy.types import RawHeaders

IDENTITY = b"identity"
READABLE = frozenset({b"gzip", b"x-gzip", b"deflate"})
_GZIP_OR_ZLIB = 47  # zlib's wbits: 32 (detect a gzip or a zlib header) + 15 (the largest window)
_RAW_DEFLATE = -15  # "deflate" as some servers send it: no zlib header


def content_coding(headers: RawHeaders) -> bytes:
    """The response's Content-Encoding, lower-cased (several are joined with ", "); ``identity``
    when it has none."""
    codings = [
        value.strip().lower() for name, value in headers if name.lower() == b"content-encoding"
    ]
    return b", ".join(c for c in codings if c) or IDENTITY


class Decoder:
    """Decodes a body chunk by chunk, as it is relayed, up to ``limit`` decoded bytes in all
    (None: no limit). ``readable`` is False for a coding it cannot read, or once the body proved
    not to be what its coding says; it then decodes nothing more."""

    def __init__(self, coding: bytes, *, limit: int | None = None) -> None:
        self.readable = coding == IDENTITY or coding in READABLE
        self._remaining = limit
        self._inflate = zlib.decompressobj(wbits=_GZIP_OR_ZLIB) if coding in READABLE else None
        self._may_be_raw = coding == b"deflate"  # until its first bytes are read

    @classmethod
    def of(cls, headers: RawHeaders, *, limit: int | None = None) -> Decoder:
        return cls(content_coding(headers), limit=limit)

    def decode(self, chunk: bytes) -> bytes:
        if not self.readable or self._remaining == 0:
            return b""
        if self._inflate is None:
            out = chunk
        else:
            try:
                out = self._inflate.decompress(chunk, self._remaining or 0)
            except zlib.error:
                if not self._may_be_raw:
                    self.readable = False
                    return b""
                self._inflate = zlib.decompressobj(wbits=_RAW_DEFLATE)
                self._may_be_raw = False
                return self.decode(chunk)
            self._may_be_raw = False
        if self._remaining is not None:
            out = out[: self._remaining]
            self._remaining -= len(out)
        return out


def decoded(body: bytes, headers: RawHeaders, *, limit: int | None = None) -> bytes:
    """``body`` without its content coding (at most ``limit`` bytes); b"" when it cannot be read."""
    return Decoder.of(headers, limit=limit).decode(body)


def readable_accept_encoding(headers: RawHeaders) -> RawHeaders:
    """``headers`` with Accept-Encoding narrowed, in place, to the codings the proxy can read,
    kept as the client wrote them (``br, gzip;q=0.8`` becomes ``gzip;q=0.8``), or to
    ``identity`` when none is left. A request without the header is left without it."""
    return [
        (name, _readable(value) if name.lower() == b"accept-encoding" else value)
        for name, value in headers
    ]


def _readable(accepted: bytes) -> bytes:
    return (
        b", ".join(item.strip() for item in accepted.split(b",") if _is_readable(item)) or IDENTITY
    )


def _is_readable(item: bytes) -> bool:
    coding = item.split(b";", 1)[0].strip().lower()
    return coding == IDENTITY or coding in READABLE
