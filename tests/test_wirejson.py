"""proxy.wirejson: what a client may send that orjson alone would not carry as it came."""

from __future__ import annotations

import json
import math

from proxy import wirejson


def test_nan_and_infinity_are_written_back_as_the_client_wrote_them() -> None:
    raw = b'{"temperature": NaN, "x": {"bounds": [Infinity, -Infinity, 1.5]}, "n": 2}'
    body = wirejson.parse(raw)
    assert math.isnan(body["temperature"]) and body["x"]["bounds"][:2] == [math.inf, -math.inf]
    body["messages"] = [{"role": "user", "content": "rewritten"}]
    out = wirejson.encode(body)
    assert out == (
        b'{"temperature":NaN,"x":{"bounds":[Infinity,-Infinity,1.5]},"n":2,'
        b'"messages":[{"role":"user","content":"rewritten"}]}'
    )
    assert wirejson.encode(wirejson.parse(out)) == out  # stable across rewrites
    assert wirejson.canonical(body) == wirejson.canonical(wirejson.parse(out))  # same hash


def test_a_lone_surrogate_goes_out_as_its_escape() -> None:
    body = wirejson.parse(b'{"content": "a \\ud800 b \xc3\xa9"}')
    assert body["content"] == "a \ud800 b \u00e9"
    out = wirejson.encode(body)
    assert out.decode("utf-8") == '{"content":"a \\ud800 b \\u00e9"}'  # valid UTF-8 JSON
    assert json.loads(out) == body
