"""The access log's line: compact JSON, the same text whichever encoder wrote it."""

from __future__ import annotations

import json
import logging

import pytest

from proxy.server.access_log import Exchange, _write


@pytest.mark.parametrize(
    ("path", "written"),
    [
        ("/v1/chat/completions", '"path":"/v1/chat/completions"'),
        (
            "/v1/caf\u00e9/\U0001f600",
            '"path":"/v1/caf\\u00e9/\\ud83d\\ude00"',
        ),  # escaped, as before
    ],
)
def test_a_line_is_compact_json_with_non_ascii_escaped(
    caplog: pytest.LogCaptureFixture, path: str, written: str
) -> None:
    exchange = Exchange(status=200, bytes_in=312, bytes_out=4210, upstream_ms=0.5151)
    exchange.client_left = True
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        _write({"method": "POST", "path": path}, exchange, total_ms=12.3456)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "proxy.access"]
    expected = {
        "method": "POST",
        "path": path,
        "status": 200,
        "upstream_ms": 0.52,
        "total_ms": 12.35,
        "bytes_in": 312,
        "bytes_out": 4210,
        "client_left": True,
    }
    assert line == json.dumps(expected, separators=(",", ":"))
    assert written in line
