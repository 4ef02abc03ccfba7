"""A provider's answer, whatever its shape, is read or left alone by the recall readers of every
dialect: never an exception (which would be the proxy's 500 or a broken stream). Random JSON
built from the keys the readers look at, in every place and of every type."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.compaction.dialect.recall import Answered, ModelReply, RecallShape
from proxy.dialects.anthropic_recall import ANTHROPIC_RECALL
from proxy.dialects.chat_recall import CHAT_RECALL
from proxy.dialects.responses_recall import RESPONSES_RECALL
from tests.support.recall_model import TOOL

SHAPES: list[RecallShape] = [CHAT_RECALL, RESPONSES_RECALL, ANTHROPIC_RECALL]
KEYS = st.sampled_from(
    [
        "choices",
        "delta",
        "message",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "index",
        "content",
        "type",
        "item",
        "output",
        "response",
        "content_block",
        "input",
        "partial_json",
        "text",
        "usage",
        "refusal",
        "call_id",
        "sequence_number",
        "output_index",
        "finish_reason",
    ]
)
WORDS = st.sampled_from(
    [
        TOOL,
        "function_call",
        "message",
        "tool_use",
        "text",
        "content_block_start",
        "content_block_delta",
        "input_json_delta",
        "text_delta",
        "message_start",
        "message_delta",
        "response.output_item.added",
        "response.completed",
        "response.created",
        '{"id": "rabc"}',
        "[[[",
    ]
)
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | WORDS
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=24,
)
EVENTS = st.lists(st.dictionaries(KEYS, JSON, max_size=5), max_size=6)


@settings(max_examples=300, deadline=None)
@given(events=EVENTS)
def test_any_answer_is_read_or_left_alone(events: list[dict[str, Any]]) -> None:
    for shape in SHAPES:
        for event in events:
            shape.classify(event)
        reply = shape.read_stream(events)
        for whole in events:
            read = shape.read(json.dumps(whole).encode())
            if read is not None:
                _ask_again(shape, read)
        if reply is not None:
            _ask_again(shape, reply)
        splice = shape.splice(events)
        for event in events:
            splice.continued(dict(event))


def _ask_again(shape: RecallShape, reply: ModelReply) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    answers = {call.id: "an answer" for call in reply.calls if call.name == TOOL}
    shape.ask_again(body, Answered(reply, answers, TOOL, last=True))
