"""validate_messages: the whole OpenAI vocabulary passes untouched; malformed input is named."""

from __future__ import annotations

import pytest

from proxy.core.messages import content_text, validate_messages
from proxy.errors import InvalidMessage, InvalidRequest

FULL_VOCABULARY = [
    {"role": "developer", "content": "Be terse."},
    {"role": "system", "content": [{"type": "text", "text": "Rules."}]},
    {
        "role": "user",
        "name": "ann",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-1"}},
        ],
        "x_custom": {"kept": True},
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}},
            {"id": "c2", "type": "custom", "custom": {"name": "grep", "input": "x"}},
        ],
        "refusal": None,
    },
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a cat"}]},
    {"role": "tool", "tool_call_id": "c2", "content": "no match"},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "function", "name": "f", "content": "ok"},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
]


def test_full_vocabulary_passes_through_as_the_same_objects() -> None:
    messages = [dict(m) for m in FULL_VOCABULARY]
    result = validate_messages(messages)
    assert result is messages
    assert all(a is b for a, b in zip(result, messages, strict=True))
    assert result[2]["x_custom"] == {"kept": True}


@pytest.mark.parametrize(
    ("messages", "index", "field"),
    [
        ([{"role": "user", "content": "a"}, "nope"], 1, ""),
        ([{"role": "robot", "content": "a"}], 0, "role"),
        ([{"content": "a"}], 0, "role"),
        ([{"role": "user"}], 0, "content"),
        ([{"role": "user", "content": 5}], 0, "content"),
        ([{"role": "user", "content": [{"text": "a"}]}], 0, "content[0]"),
        ([{"role": "user", "content": [{"type": "text", "text": 1}]}], 0, "content[0].text"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], 0, "content[0].image_url"),
        ([{"role": "tool", "content": "x"}], 0, "tool_call_id"),
        ([{"role": "function", "content": "x"}], 0, "name"),
        ([{"role": "user", "content": "a", "name": 3}], 0, "name"),
        ([{"role": "assistant", "tool_calls": {}}], 0, "tool_calls"),
        ([{"role": "assistant", "tool_calls": [{"type": "function"}]}], 0, "tool_calls[0].id"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}],
            0,
            "tool_calls[0].function.name",
        ),
        ([{"role": "user", "content": "a", "tool_calls": []}], 0, "tool_calls"),
        ([{"role": "assistant", "function_call": "f"}], 0, "function_call"),
    ],
)
def test_malformed_message_names_index_and_field(
    messages: list[object], index: int, field: str
) -> None:
    with pytest.raises(InvalidMessage) as info:
        validate_messages(messages)
    assert (info.value.index, info.value.field) == (index, field)
    assert info.value.status_code == 400
    assert f"messages[{index}]" in info.value.message


@pytest.mark.parametrize("raw", [None, {}, "messages", []])
def test_messages_must_be_a_non_empty_array(raw: object) -> None:
    with pytest.raises(InvalidRequest):
        validate_messages(raw)


def test_content_text_reads_strings_and_text_parts() -> None:
    assert content_text("hi") == "hi"
    assert content_text(None) == ""
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {}},
        {"type": "refusal", "refusal": "b"},
    ]
    assert content_text(parts) == "a\nb"
