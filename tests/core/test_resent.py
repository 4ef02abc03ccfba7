"""proxy.core.resent.parse_body: a conversation's body sent again, parsed from where it differs.

Whatever the reuse, the value is the one ``wirejson.parse`` gives for the same bytes; the earlier
body's history items are taken (the very objects) only when its bytes up to them came again.
"""

from __future__ import annotations

import json
import random

import orjson
import pytest

from proxy import wirejson
from proxy.core import resent
from proxy.errors import InvalidRequest


@pytest.fixture(autouse=True)
def follow_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reuse must hold at any size: these bodies are small, and followed all the same."""
    monkeypatch.setattr(resent, "FOLLOW_BYTES", 0)


def test_a_small_body_is_parsed_whole_and_not_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    raw = json.dumps({"model": "m", "messages": _turns(3)}).encode()
    assert len(raw) < resent.FOLLOW_BYTES
    parsed = resent.parse_body(raw, "messages")
    assert parsed.value == json.loads(raw) and not parsed.end
    big = json.dumps({"model": "m", "messages": _turns(200)}).encode()
    assert resent.parse_body(big, "messages").end


def _turns(n: int, start: int = 0) -> list[dict]:
    out: list[dict] = []
    for i in range(start, start + n):
        out.append({"role": "user", "content": f"question {i}: why does caf\u00e9 \u2192 fail?"})
        out.append({"role": "assistant", "content": f"answer {i} \U0001f600", "name": None})
    return out


def _again(first: bytes, then: bytes, field: str = "messages") -> resent.ParsedBody:
    last = resent.parse_body(first, field)
    return resent.parse_body(then, field, last)


@pytest.mark.parametrize(
    "dumps",
    [
        json.dumps,  # a Python client: ", " and ": ", non-ASCII escaped
        orjson.dumps,  # a JavaScript or Rust client: compact, UTF-8 as it is
        lambda value: json.dumps(value, indent=2),  # pretty-printed
    ],
)
def test_a_body_sent_again_with_turns_appended_takes_the_earlier_turns_as_parsed(dumps) -> None:
    history = [{"role": "system", "content": "be brief"}, *_turns(30)]
    first = {"model": "gpt-5", "messages": history, "tools": [{"type": "function"}]}
    then = {"model": "gpt-5", "messages": [*history, *_turns(2, 30)], "stream": True}
    raw1, raw2 = (_bytes(dumps(body)) for body in (first, then))
    last = resent.parse_body(raw1, "messages")
    again = resent.parse_body(raw2, "messages", last)
    assert again.value == json.loads(raw2)
    assert list(again.value) == ["model", "messages", "stream"]  # the client's key order
    assert again.reused == len(history)
    kept = again.value["messages"][: len(history)]
    assert all(a is b for a, b in zip(kept, last.value["messages"], strict=True))
    # and the third request follows the second
    third = {**then, "messages": [*then["messages"], *_turns(1, 32)]}
    raw3 = _bytes(dumps(third))
    after = resent.parse_body(raw3, "messages", again)
    assert after.value == json.loads(raw3) and after.reused == len(then["messages"])


def _bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode()


def test_the_same_body_again_takes_every_turn() -> None:
    raw = json.dumps({"messages": _turns(5), "model": "m"}).encode()
    again = _again(raw, raw)
    assert again.value == json.loads(raw) and again.reused == 10


@pytest.mark.parametrize(
    ("first", "then"),
    [
        # an earlier turn edited: nothing is taken
        (
            {"model": "m", "messages": _turns(4)},
            {"model": "m", "messages": [{"role": "user", "content": "edited"}, *_turns(4)[1:]]},
        ),
        # the history's last item changed in place (a longer text)
        (
            {"messages": _turns(3)},
            {
                "messages": [
                    *_turns(3)[:-1],
                    {"role": "assistant", "content": "answer 2 \U0001f600!"},
                ]
            },
        ),
        # the history comes after a tool whose schema names a property "messages"
        (
            {"tools": [{"parameters": {"messages": [1, 2]}}], "messages": _turns(3)},
            {"tools": [{"parameters": {"messages": [1, 2]}}], "messages": _turns(4)},
        ),
        # the history shrank
        ({"messages": _turns(4)}, {"messages": _turns(3)}),
        # the field is not an array this time (Responses' input as text)
        ({"input": _turns(2)}, {"input": "hello"}),
        # a NaN in what follows the history: the exact reader's value
        ({"messages": _turns(2), "t": 1}, {"messages": _turns(3), "t": float("nan")}),
        # an integer past 64 bits after the history
        ({"messages": _turns(2)}, {"messages": _turns(3), "seed": 2**70}),
    ],
)
def test_a_body_that_differs_is_parsed_as_it_is(first: dict, then: dict) -> None:
    field = "input" if "input" in first else "messages"
    raw1, raw2 = json.dumps(first).encode(), json.dumps(then).encode()
    again = _again(raw1, raw2, field)
    expected = wirejson.parse(raw2)
    assert json.dumps(again.value) == json.dumps(expected)  # NaN != NaN: compare the text


def test_a_second_history_key_wins_as_in_a_full_parse() -> None:
    turns = json.dumps(_turns(3))
    raw1 = f'{{"messages": {turns}, "model": "m"}}'.encode()
    raw2 = f'{{"messages": {turns[:-1]}, {{"role": "user", "content": "more"}}], "messages": []}}'
    again = _again(raw1, raw2.encode())
    assert again.value == {"messages": []} == json.loads(raw2)


def test_a_body_broken_after_the_history_is_refused_as_a_full_parse_refuses_it() -> None:
    raw1 = json.dumps({"messages": _turns(3), "model": "m"}).encode()
    raw2 = raw1[:-1] + b', "stream": tru}'
    with pytest.raises(InvalidRequest) as taken:
        _again(raw1, raw2)
    with pytest.raises(InvalidRequest) as full:
        wirejson.parse(raw2)
    assert taken.value.code == full.value.code == "invalid_json"


def test_random_histories_sent_again_parse_as_a_full_parse_does() -> None:
    rng = random.Random(7)
    history: list = [{"role": "system", "content": "s"}]
    last = None
    for step in range(200):
        change = rng.random()
        if change < 0.6:  # append a few
            history = history + _turns(rng.randint(0, 2), step)
        elif change < 0.75:  # edit one message somewhere
            i = rng.randrange(len(history))
            history = [*history[:i], {"role": "user", "content": f"edit {step}"}, *history[i + 1 :]]
        elif change < 0.85:  # drop the last few
            history = history[: max(1, len(history) - rng.randint(1, 3))]
        body: dict = {"model": "m", "messages": history}
        if rng.random() < 0.5:
            body = {"tools": [{"name": "t", "messages": rng.random()}], **body}
        if rng.random() < 0.3:
            body["stream"] = rng.random() < 0.5
        dumps = rng.choice([json.dumps, orjson.dumps])
        raw = _bytes(dumps(body))
        parsed = resent.parse_body(raw, "messages", last)
        assert parsed.value == json.loads(raw), step
        assert list(parsed.value) == list(json.loads(raw))
        last = parsed


def _marked(messages: list[dict]) -> list[dict]:
    """The history as Claude Code sends it: the newest message carries the cache mark."""
    *older, newest = messages
    block = {"type": "text", "text": newest["content"], "cache_control": {"type": "ephemeral"}}
    return [*older, {"role": newest["role"], "content": [block]}]


def test_a_moved_cache_mark_keeps_every_item_before_it() -> None:
    history = [{"role": "user", "content": "fix the bug"}, *_turns(40)[1:]]
    first = {"model": "claude-x", "messages": _marked(history), "stream": True}
    then_history = [*history, {"role": "user", "content": "now run the tests"}]
    then = {"model": "claude-x", "messages": _marked(then_history), "stream": True}
    raw1, raw2 = orjson.dumps(first), orjson.dumps(then)  # JSON.stringify's bytes
    last = resent.parse_body(raw1, "messages")
    again = resent.parse_body(raw2, "messages", last)
    assert again.value == json.loads(raw2)
    assert again.reused == len(history) - 1  # all but the one that lost its mark
    kept = again.value["messages"][: again.reused]
    assert all(a is b for a, b in zip(kept, last.value["messages"], strict=False))
    third = {**then, "messages": _marked([*then_history, {"role": "assistant", "content": "ok"}])}
    after = resent.parse_body(orjson.dumps(third), "messages", again)
    assert after.value == json.loads(orjson.dumps(third)) and after.reused == len(then_history) - 1


def test_a_changed_newest_item_from_a_client_of_other_spacing_is_parsed_whole() -> None:
    history = _turns(30)
    raw1 = json.dumps({"messages": _marked(history)}).encode()  # ", " and ": ": no offsets
    raw2 = json.dumps({"messages": _marked([*history, {"role": "user", "content": "x"}])})
    again = _again(raw1, raw2.encode())
    assert again.value == json.loads(raw2) and again.reused == 0


@pytest.mark.parametrize("where", [0, 7, 19])
def test_one_character_changed_at_the_end_of_an_item_is_read_again(where: int) -> None:
    """A change as long as what it replaces, right before the item's closing brace: the items
    taken are those before the first byte that differs, not one more."""
    history = _turns(10)
    raw1 = orjson.dumps({"messages": history})
    changed = [dict(m) for m in history]
    changed[where]["content"] = changed[where]["content"][:-1] + "#"
    raw2 = orjson.dumps({"messages": [*changed, {"role": "user", "content": "next"}]})
    again = _again(raw1, raw2)
    assert again.value == json.loads(raw2) and again.reused == where


@pytest.mark.parametrize("dumps", [json.dumps, orjson.dumps])
def test_the_fields_around_a_grown_history_are_read_only_when_their_bytes_changed(dumps) -> None:
    """An agent's next request: the same tools and settings around one more turn. Its other
    fields are the last body's (the very values), and a change to any of them is read."""
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"messages": [1]}}}]
    body = {"messages": _turns(20), "tools": tools, "temperature": 0.5}
    chain = [_bytes(dumps(body))]
    for n in range(3):
        body = {**body, "messages": [*body["messages"], *_turns(1, 20 + n)]}
        chain.append(_bytes(dumps(body)))
    changed = {**body, "messages": [*body["messages"], *_turns(1, 30)], "temperature": 0.7}
    chain.append(_bytes(dumps(changed)))
    last = resent.parse_body(chain[0], "messages")
    parsed = []
    for raw in chain[1:]:
        last = resent.parse_body(raw, "messages", last)
        assert last.value == json.loads(raw) and list(last.value) == list(json.loads(raw))
        parsed.append(last)
    assert parsed[2].value["tools"] is parsed[1].value["tools"]  # read once, then taken
    assert parsed[3].value["temperature"] == 0.7
    assert parsed[3].reused == len(body["messages"])


def test_a_trailing_comma_after_the_history_is_refused_as_a_full_parse_refuses_it() -> None:
    turns = json.dumps(_turns(3))
    raw1 = f'{{"messages": {turns}, "model": "m"}}'.encode()
    raw2 = f'{{"messages": {turns[:-1]}, ], "model": "m"}}'.encode()
    with pytest.raises(InvalidRequest):
        wirejson.parse(raw2)
    last = resent.parse_body(raw1, "messages")
    for follow in (last, resent.parse_body(raw1, "messages", last)):
        with pytest.raises(InvalidRequest):
            resent.parse_body(raw2, "messages", follow)


def test_a_second_history_key_of_the_same_items_is_never_taken_for_the_first() -> None:
    """Written as orjson writes it, the first array holds what the second does: the bytes
    after the history repeat it, yet the history is the second key's, as in a full parse."""
    items = _turns(2)
    raw = orjson.dumps({"messages": items})[:-1] + b',"messages":' + orjson.dumps(items) + b"}"
    last = resent.parse_body(raw, "messages")
    for n in range(3):
        grown = orjson.dumps([*items, *_turns(n + 1, 5)])
        again = raw.replace(orjson.dumps(items), grown, 1)
        last = resent.parse_body(again, "messages", last)
        assert last.value == json.loads(again) == {"messages": items}


@pytest.mark.parametrize("known", [False, True])
def test_a_new_item_nested_past_what_a_full_parse_reads_is_refused_alike(known: bool) -> None:
    history = _turns(3)
    raw1 = orjson.dumps({"messages": history, "model": "m"})
    last = resent.parse_body(raw1, "messages")
    if known:  # its fields around the history known: only the new items are read
        last = resent.parse_body(raw1, "messages", last)
    for depth in range(1018, 1026):
        nested = b"[" * depth + b"]" * depth
        raw2 = raw1.replace(b"}]", b'},{"role":"user","content":"x","x":' + nested + b"}]", 1)
        try:
            full = len(wirejson.parse(raw2)["messages"])
        except InvalidRequest:
            full = None
        try:
            followed = len(resent.parse_body(raw2, "messages", last).value["messages"])
        except InvalidRequest:
            followed = None
        assert followed == full, depth
