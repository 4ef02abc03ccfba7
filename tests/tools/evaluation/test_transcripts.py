"""Built-in transcripts, user JSONL, the truncation baseline and identifier probes."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.core.messages import validate_messages
from proxy.core.tokens import TokenCounter
from proxy.tools.evaluation.probes import CATEGORIES, identifier_probes
from proxy.tools.evaluation.synthetic import builtin_transcripts, coding_agent
from proxy.tools.evaluation.transcripts import read_jsonl
from proxy.tools.evaluation.truncation import truncate


def test_builtin_transcripts_plant_every_category_and_are_seeded() -> None:
    for transcript in builtin_transcripts():
        validate_messages(transcript.messages)  # a body the proxy accepts
        assert {p.category for p in transcript.probes} == set(CATEGORIES)
        for probe in transcript.probes:
            assert probe.answer is not None and probe.planted is not None
            assert probe.answer in json.dumps(transcript.messages[probe.planted])
            assert probe.answer not in probe.question
    assert coding_agent() == coding_agent()
    assert coding_agent(seed=8).messages != coding_agent().messages


def test_the_coding_agent_is_one_task_of_many_tool_rounds() -> None:
    messages = coding_agent(rounds=120).messages
    assert [m["role"] for m in messages].count("user") == 1
    calls = [m for m in messages if m.get("tool_calls")]
    assert len(calls) == 120
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert answered == {c["id"] for m in calls for c in m["tool_calls"]}


def test_truncation_keeps_the_preamble_and_never_orphans_a_tool_result(tiktoken_files) -> None:
    messages = coding_agent(rounds=20).messages
    counter = TokenCounter()
    for budget in range(50, 600, 37):
        kept = truncate(messages, budget=budget, counter=counter, model="gpt-4o")
        assert kept[0] == messages[0]
        assert counter.count_messages(kept, "gpt-4o") <= budget or len(kept) == 1
        assert len(kept) == 1 or kept[1]["role"] != "tool"
        assert kept[1:] == messages[len(messages) - len(kept) + 1 :]


def test_ungrouped_lines_are_grouped_by_their_opening(tmp_path: Path) -> None:
    a = [{"role": "system", "content": "s"}, {"role": "user", "content": "first"}]
    b = [{"role": "user", "content": "other"}]
    longer = [*a, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps({"messages": m}) for m in (a, b, longer)) + "\n")
    found = read_jsonl(path)
    assert sorted(len(t.messages) for t in found) == [1, 4]


def test_identifier_probes_blank_out_their_answer() -> None:
    messages = [
        {"role": "system", "content": "Config lives at /etc/app/main.yaml"},  # preamble: skipped
        {"role": "user", "content": "Use the bucket s3-bucket-77 and order ORD-12345 please."},
        *[{"role": "assistant", "content": "ok"}] * 3,
    ]
    probes = identifier_probes(messages, limit=5)
    assert [(p.category, p.answer) for p in probes] == [
        ("fact", "s3-bucket-77"),
        ("fact", "ORD-12345"),
    ]
    assert all(p.answer not in p.question and "____" in p.question for p in probes)
