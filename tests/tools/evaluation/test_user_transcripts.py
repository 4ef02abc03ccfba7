"""``eval`` on a user's own transcripts: JSONL of chat requests, probes made from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.cli import main
from proxy.tools.evaluation.probes import identifier_probes
from tests.support.mock_upstream import MockUpstream
from tests.tools.evaluation.command import run_eval, write_config
from tests.tools.evaluation.provider import ANSWERER, JUDGE, EvalProvider

EARLY = (
    "Deploy the app with deploy/prod-eu.yaml to https://deploy.example.com/app-17; the change "
    "ticket is OPS-4411."
)
DECIDED = "Understood. The queue will use Postgres, as we decided."
JUDGE_PROBE = {"category": "decision", "question": "Which database will the queue use?",
               "answer": "Postgres"}  # fmt: skip


def conversation(turns: int = 10) -> list[dict[str, Any]]:
    messages = [
        {"role": "system", "content": "You are a deployment assistant."},
        {"role": "user", "content": EARLY},
        {"role": "assistant", "content": DECIDED},
    ]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Any news on part {'abcdefghijklmn'[i]}?"})
        messages.append({"role": "assistant", "content": "Nothing new, all calm."})
    return messages


def write_log(path: Path, messages: list[dict[str, Any]]) -> None:
    """What the proxy records: every request of the conversation, each with its history."""
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    lines = [{"model": "gpt-4o", "messages": messages[:end], "conversation": "c1"} for end in ends]
    lines[-1]["messages"] = messages  # the last line holds the whole history
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_identifier_probes_without_a_judge(tmp_path: Path, mock: MockUpstream) -> None:
    messages = conversation()
    log = tmp_path / "log.jsonl"
    write_log(log, messages)
    probes = identifier_probes(messages, limit=4)
    assert [p.answer for p in probes] == [
        "deploy/prod-eu.yaml",
        "https://deploy.example.com/app-17",
        "OPS-4411",
    ]
    EvalProvider(mock, answers={p.question: p.answer for p in probes})
    report = run_eval(
        tmp_path, write_config(tmp_path, mock), "--transcripts", str(log), "--probes", "4"
    )
    assert [t["name"] for t in report["transcripts"]] == ["log:c1"]
    overall = report["policies"]["default"]["accuracy"]["overall"]
    # Identifiers are kept verbatim by the summarizer; a short window has none of them.
    assert (overall["probes"], overall["full"], overall["compacted"], overall["truncated"]) == (
        3,
        1.0,
        1.0,
        0.0,
    )
    assert {a["method"] for a in report["answers"]} == {"match"}


def test_the_judge_writes_and_grades_probes(tmp_path: Path, mock: MockUpstream) -> None:
    messages = conversation()
    log = tmp_path / "log.jsonl"
    write_log(log, messages)
    probes = identifier_probes(messages, limit=3)
    answers = {p.question: p.answer for p in probes} | {JUDGE_PROBE["question"]: "Postgres"}
    EvalProvider(mock, answers=answers, judge_probes=[JUDGE_PROBE])
    config = write_config(tmp_path, mock)
    report = run_eval(
        tmp_path, config, "--transcripts", str(log), "--probes", "4", "--judge-model", JUDGE
    )
    assert report["judge_model"] == JUDGE
    judged = [a for a in report["answers"] if a["method"] == "judge"]
    assert {a["question"] for a in judged} == {JUDGE_PROBE["question"]}
    # The summary dropped the decision (not an identifier); the judge sees the replies.
    assert {(a["variant"], a["correct"]) for a in judged} == {
        ("full", True),
        ("compacted", False),
        ("truncated", False),
    }
    decision = report["policies"]["default"]["accuracy"]["decision"]
    assert (decision["probes"], decision["full"], decision["compacted_vs_full"]) == (1, 1.0, 0.0)
    assert report["policies"]["default"]["accuracy"]["overall"]["probes"] == 4


def test_bad_input_is_a_message_and_exit_2(tmp_path: Path, mock: MockUpstream, capsys) -> None:
    config = write_config(tmp_path, mock)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\nnot json\n')
    assert main(["eval", "--config", config, "--model", ANSWERER, "--transcripts", str(bad)]) == 2
    assert "bad.jsonl, line 2: not valid JSON" in capsys.readouterr().err
    assert main(["eval", "--config", config, "--model", ANSWERER, "--policy", "nope"]) == 2
    assert "no configured policy named 'nope'" in capsys.readouterr().err
    assert mock.chat_requests() == []  # nothing was asked
