"""Reading what a provider compressed, and asking only for what can be read."""

from __future__ import annotations

import gzip
import zlib

import pytest

from proxy.compaction.models.window_sources import window_from_error
from proxy.upstream.content_coding import Decoder, content_coding, decoded, readable_accept_encoding

ERROR = b'{"error":{"message":"maximum context length is 8192 tokens"}}'


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "compressed"),
    [
        (b"gzip", gzip.compress(ERROR)),
        (b"x-gzip", gzip.compress(ERROR)),
        (b"deflate", zlib.compress(ERROR)),
        (b"deflate", raw_deflate(ERROR)),  # as some servers send "deflate"
        (b"GZIP", gzip.compress(ERROR)),
        (b"identity", ERROR),
        (None, ERROR),
    ],
)
def test_an_answer_is_read_in_any_coding_zlib_knows(
    coding: bytes | None, compressed: bytes
) -> None:
    headers = [(b"Content-Encoding", coding)] if coding is not None else []
    assert window_from_error(decoded(compressed, headers)) == 8192


def test_a_compressed_stream_is_decoded_chunk_by_chunk_up_to_its_limit() -> None:
    body = b"".join(b'data: {"n": %d}\n\n' % i for i in range(5000))
    compressed = gzip.compress(body)
    decoder = Decoder(b"gzip", limit=1000)
    out = b"".join(decoder.decode(compressed[i : i + 7]) for i in range(0, len(compressed), 7))
    assert out == body[:1000]
    unlimited = Decoder(b"gzip")
    assert b"".join(unlimited.decode(compressed[i : i + 64]) for i in range(0, 99_999, 64)) == body


def test_a_bomb_is_decoded_no_further_than_the_limit() -> None:
    bomb = gzip.compress(b"\0" * (50 << 20))
    assert len(decoded(bomb, [(b"content-encoding", b"gzip")], limit=65536)) == 65536


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ([(b"content-encoding", b"br")], b"\x1b\x00"),
        ([(b"content-encoding", b"zstd")], b"\x28\xb5\x2f\xfd"),
        ([(b"content-encoding", b"gzip"), (b"content-encoding", b"br")], b"?"),
        ([(b"content-encoding", b"gzip")], b"not gzip at all"),
    ],
)
def test_what_cannot_be_read_reads_as_nothing(headers: list, body: bytes) -> None:
    decoder = Decoder.of(headers)
    assert decoder.decode(body) == b"" and not decoder.readable
    assert decoder.decode(gzip.compress(ERROR)) == b""


def test_content_coding_joins_and_lowercases() -> None:
    assert content_coding([]) == b"identity"
    assert content_coding([(b"Content-Encoding", b" GZip ")]) == b"gzip"
    headers = [(b"content-encoding", b"gzip"), (b"Content-Encoding", b"br")]
    assert content_coding(headers) == b"gzip, br"


@pytest.mark.parametrize(
    ("sent", "asked"),
    [
        (b"gzip, deflate", b"gzip, deflate"),  # every Python SDK: unchanged
        (b"gzip, deflate, br, zstd", b"gzip, deflate"),  # Node's fetch
        (b"br;q=1.0, GZIP;q=0.8, *;q=0.1", b"GZIP;q=0.8"),
        (b"br", b"identity"),
        (b"identity", b"identity"),
        (b"zstd, identity;q=0.5", b"identity;q=0.5"),
    ],
)
def test_accept_encoding_keeps_only_what_can_be_read(sent: bytes, asked: bytes) -> None:
    headers = [(b"authorization", b"Bearer k"), (b"accept-encoding", sent), (b"accept", b"*/*")]
    assert readable_accept_encoding(headers) == [
        (b"authorization", b"Bearer k"),
        (b"accept-encoding", asked),
        (b"accept", b"*/*"),
    ]


def test_no_accept_encoding_stays_none() -> None:
    headers = [(b"authorization", b"Bearer k")]
    assert readable_accept_encoding(headers) == headers
