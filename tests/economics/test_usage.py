"""Reading what the provider billed from the end of a body, plain and streamed, in every API."""

from __future__ import annotations

import json
import random
import re

import pytest

from proxy.economics.usage import _DECODER, BilledUsage, Wire, _usage_objects, billed_usage


def sse(*events: tuple[str | None, object]) -> bytes:
    """A stream: each event an optional ``event:`` name and its ``data:`` (JSON or text)."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


CHAT_USAGE = {
    "prompt_tokens": 12_000,
    "completion_tokens": 300,
    "total_tokens": 12_300,
    "prompt_tokens_details": {"cached_tokens": 10_240, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def chat_json(usage: object = CHAT_USAGE, content: str = "Hello there.") -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": usage,
    }
    return json.dumps(body).encode()


def test_chat_json_splits_cached_from_uncached() -> None:
    assert billed_usage(chat_json(), "chat") == BilledUsage(
        input_uncached=1_760, cached_read=10_240, cache_write=0, output=300
    )


def test_chat_without_details_is_all_uncached() -> None:
    # vLLM and other OpenAI-compatible servers report no prompt_tokens_details (or null).
    for usage in (
        {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57},
        {"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": None},
    ):
        assert billed_usage(chat_json(usage), "chat") == BilledUsage(50, 0, 0, 7)


def test_chat_reads_cache_writes_of_the_gpt_5_6_family() -> None:
    usage = {
        "prompt_tokens": 5_000,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 1_024, "cache_write_tokens": 3_207},
    }
    assert billed_usage(chat_json(usage), "chat") == BilledUsage(769, 1_024, 3_207, 10)


def test_chat_stream_reads_the_last_chunk_of_include_usage() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4.1"}
    body = sse(
        (None, {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}}], "usage": None}),
        (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, {**chunk, "choices": [], "usage": CHAT_USAGE}),
        (None, "[DONE]"),
    )
    assert billed_usage(body, "chat") == BilledUsage(1_760, 10_240, 0, 300)


def test_chat_stream_without_include_usage_has_none() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": None}
    assert billed_usage(sse((None, chunk), (None, "[DONE]")), "chat") is None


def test_a_tail_cut_anywhere_before_the_usage_still_reads() -> None:
    body = chat_json(content="x" * 20_000)
    for cut in (1, 7, 10_000, len(body) - 400):
        assert billed_usage(body[cut:], "chat") == BilledUsage(1_760, 10_240, 0, 300)


def test_usage_quoted_in_the_content_is_not_read() -> None:
    fake = json.dumps({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    body = chat_json(content=f"the tool said {fake}")
    assert billed_usage(body, "chat") == BilledUsage(1_760, 10_240, 0, 300)
    only_quoted = json.dumps({"choices": [{"message": {"content": fake}}]}).encode()
    assert billed_usage(only_quoted, "chat") is None


def test_nothing_to_read() -> None:
    assert billed_usage(b"", "chat") is None
    assert billed_usage(b'{"error": {"message": "overloaded"}}', "responses") is None
    assert billed_usage(b'{"usage": {"prompt_tokens": "12"}}', "chat") is None  # not a count
    assert (
        billed_usage(b'{"usage": {"prompt_tokens": 12, "completion_tokens": -1}}', "chat") is None
    )


def test_a_tail_starting_inside_a_character_still_reads() -> None:
    # A tail is cut by bytes: its first character may be half of a UTF-8 sequence.
    body = "é".encode() * 3 + b'{"usage": {"prompt_tokens": 3, "completion_tokens": 1}'
    assert billed_usage(body[1:], "chat") == BilledUsage(3, 0, 0, 1)


def test_figures_that_do_not_add_up_are_clamped() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 500},
    }
    assert billed_usage(chat_json(usage), "chat") == BilledUsage(0, 100, 0, 1)


RESPONSES_USAGE = {
    "input_tokens": 9_000,
    "input_tokens_details": {"cached_tokens": 8_064},
    "output_tokens": 120,
    "output_tokens_details": {"reasoning_tokens": 64},
    "total_tokens": 9_120,
}


def responses_object(usage: object) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "Done."}]}],
        "usage": usage,
        "user": None,
        "metadata": {"usage": "a string value, not an object"},
    }


def test_responses_json() -> None:
    body = json.dumps(responses_object(RESPONSES_USAGE)).encode()
    assert billed_usage(body, "responses") == BilledUsage(936, 8_064, 0, 120)


def test_responses_stream_reads_response_completed() -> None:
    body = sse(
        ("response.created", {"type": "response.created", "response": responses_object(None)}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Done."}),
        (
            "response.completed",
            {"type": "response.completed", "response": responses_object(RESPONSES_USAGE)},
        ),
    )
    assert billed_usage(body, "responses") == BilledUsage(936, 8_064, 0, 120)


def test_responses_cache_writes() -> None:
    usage = {
        **RESPONSES_USAGE,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 3_207},
    }
    body = json.dumps(responses_object(usage)).encode()
    assert billed_usage(body, "responses") == BilledUsage(5_793, 0, 3_207, 120)


ANTHROPIC_USAGE = {
    "input_tokens": 40,  # after the last breakpoint: cached tokens are not in it
    "cache_creation_input_tokens": 2_000,
    "cache_read_input_tokens": 30_000,
    "output_tokens": 500,
    "service_tier": "standard",
}


def test_anthropic_json_input_tokens_exclude_the_cache() -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "t", "name": "read", "input": {"path": "usage.txt"}},
        ],
        "stop_reason": "tool_use",
        "usage": ANTHROPIC_USAGE,
    }
    usage = billed_usage(json.dumps(body).encode(), "messages")
    assert usage == BilledUsage(
        input_uncached=40, cached_read=30_000, cache_write=2_000, output=500
    )
    assert usage.prompt == 32_040


def test_anthropic_json_without_cache_fields() -> None:
    body = {
        "type": "message",
        "usage": {
            "input_tokens": 12,
            "output_tokens": 3,
            "cache_creation_input_tokens": None,
            "cache_read_input_tokens": None,
        },
    }
    assert billed_usage(json.dumps(body).encode(), "messages") == BilledUsage(12, 0, 0, 3)


def anthropic_stream(delta_usage: dict) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "content": [],
            "usage": {**ANTHROPIC_USAGE, "output_tokens": 1},
        },
    }
    return sse(
        ("message_start", start),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "x" * 9_000},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage},
        ),
        ("message_stop", {"type": "message_stop"}),
    )


def test_anthropic_stream_input_from_message_start_output_from_message_delta() -> None:
    body = anthropic_stream({"output_tokens": 500})
    assert billed_usage(body, "messages") == BilledUsage(40, 30_000, 2_000, 500)


def test_anthropic_stream_cumulative_message_delta_is_read_alone() -> None:
    body = anthropic_stream(ANTHROPIC_USAGE)
    tail = body[-2_000:]  # message_start is long gone
    assert billed_usage(tail, "messages") == BilledUsage(40, 30_000, 2_000, 500)


def test_anthropic_tail_without_input_figures_needs_the_head() -> None:
    body = anthropic_stream({"output_tokens": 500})
    head, tail = body[:600], body[-2_000:]
    assert billed_usage(tail, "messages") is None
    assert billed_usage(head + tail, "messages") == BilledUsage(40, 30_000, 2_000, 500)


@pytest.mark.parametrize("wire", ["chat", "responses", "messages"])
def test_every_wire_ignores_an_unfinished_usage(wire: Wire) -> None:
    assert billed_usage(b'{"usage": {"prompt_tokens": 5, "input_tokens": 5, "out', wire) is None


def test_the_usage_objects_are_those_a_regular_expression_of_the_key_finds() -> None:
    """The key is found by its name and checked around it: exactly the objects the expression
    ``[{,]\\s*"usage"\\s*:\\s*(?=\\{)`` finds (non-JSON whitespace, escaped names, keys in a
    row, nested usages, cut-off objects), in the same order."""
    key = re.compile(r'[{,]\s*"usage"\s*:\s*(?=\{)')

    def expected(text: str) -> list[object]:
        out = []
        for match in key.finditer(text):
            try:
                value, _ = _DECODER.raw_decode(text, match.end())
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    pieces = [
        "{", "}", ",", " ", "\n", "\u00a0", "\u2003", "\x1c", ":", '"usage"', '\\"usage\\"',
        '"usage"', '"x"', "[", "]", '{"prompt_tokens": 1, "completion_tokens": 2}', "1", "é",
        '{"usage":', ', "usage" : ', '"usage":', '\u00a0"usage"\u00a0:\u00a0', '"usage"\x1c:',
    ]  # fmt: skip
    found = 0
    chance = random.Random(7)
    for _ in range(3000):
        text = "".join(chance.choice(pieces) for _ in range(chance.randint(0, 14)))
        objects = _usage_objects(text)
        assert objects == expected(text), text
        found += bool(objects)
    assert found > 50  # the texts hold usages often
    assert _usage_objects('{"usage": {"a": 1}, "b": {"usage":{"c": 2}}}') == [{"a": 1}, {"c": 2}]
