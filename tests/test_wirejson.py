"""proxy.wirejson: what a client may send that orjson alone would not carry as it came."""

from __future__ import annotations

import json
import math

import pytest

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


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("[" * 128 + "]" * 128, 128),
        ('{"a": "' + "[" * 500 + '"}', 1),  # brackets in a string are text
        ('["\\"[[[[", ' + "{}," * 300 + "1]", 2),
        ('{"a": [{"b": {"c": [1, "]]]"]}}]}', 5),
    ],
)
def test_json_within_the_depth_is_read(text: str, depth: int) -> None:
    assert wirejson.loads_shallow(text) == json.loads(text)
    assert wirejson.nests_within(json.loads(text), depth)
    assert depth == 1 or not wirejson.nests_within(json.loads(text), depth - 1)


@pytest.mark.parametrize(
    "text",
    ["[" * 129 + "]" * 129, "[" * 100_000 + "]" * 100_000, '{"a":' * 200 + "1" + "}" * 200],
)
def test_json_past_the_depth_is_refused_before_it_is_parsed(text: str) -> None:
    with pytest.raises(wirejson.TooDeep):
        wirejson.loads_shallow(text)
    with pytest.raises(ValueError):  # bytes too, and callers that catch any bad JSON
        wirejson.loads_shallow(text.encode())


def test_unpaired_brackets_are_bad_json_not_a_recursion() -> None:
    for text in ("[" * 5000, "[" * 3000 + "}" * 3000, "]" * 300):
        with pytest.raises(ValueError):
            wirejson.loads_shallow(text)
