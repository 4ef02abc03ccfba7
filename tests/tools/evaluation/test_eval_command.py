"""``compaction-proxy eval`` end to end against a real mock provider whose answers are known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.compaction.summaries.transcript import identifiers
from proxy.tools.evaluation.synthetic import builtin_transcripts
from tests.support.mock_upstream import MockUpstream
from tests.tools.evaluation.command import run_eval, write_config
from tests.tools.evaluation.provider import EvalProvider

SIZES = {"rounds": 30, "turns": 20, "documents": 6}
SIZE_ARGS = ["--agent-rounds", "30", "--chat-turns", "20", "--documents", "6"]
KEPT_CATEGORY = "decision"  # the extractive summarizer keeps the lines holding these answers


def test_accuracies_are_what_the_summary_kept(tmp_path: Path, mock: MockUpstream, capsys) -> None:
    transcripts = builtin_transcripts(**SIZES)
    probes = [(t, p) for t in transcripts for p in t.probes]
    kept = frozenset(p.answer for _, p in probes if p.category == KEPT_CATEGORY)
    provider = EvalProvider(mock, answers={p.question: p.answer for _, p in probes}, keep=kept)
    report = run_eval(
        tmp_path,
        write_config(tmp_path, mock),
        "--policy",
        "default",
        "--policy",
        "drop",
        *SIZE_ARGS,
    )

    # What survives: the kept lines, and every identifier (the summarizer keeps those verbatim).
    def survives(answer: str) -> bool:
        return answer in kept or identifiers(answer) == [answer]

    def late(transcript: Any, planted: int) -> bool:
        return planted >= len(transcript.messages) - 3

    answers = report["answers"]
    assert len(answers) == len(probes) * 5  # full once, compacted and truncated per policy
    for transcript, probe in probes:
        got = {
            (a["variant"], a["policy"]): a["correct"]
            for a in answers
            if a["transcript"] == transcript.name and a["question"] == probe.question
        }
        assert got == {
            ("full", None): True,
            ("compacted", "default"): survives(probe.answer),
            ("truncated", "default"): late(transcript, probe.planted),
            ("compacted", "drop"): False,
            ("truncated", "drop"): False,
        }, (transcript.name, probe)
    overall = report["policies"]["default"]["accuracy"]["overall"]
    n = len(probes)
    assert overall["probes"] == n
    assert overall["full"] == 1.0
    assert overall["compacted"] == round(sum(survives(p.answer) for _, p in probes) / n, 4)
    assert overall["truncated"] == round(sum(late(t, p.planted) for t, p in probes) / n, 4)
    assert report["policies"]["default"]["accuracy"][KEPT_CATEGORY]["compacted"] == 1.0
    assert report["policies"]["drop"]["accuracy"]["overall"]["compacted_vs_full"] == 0.0
    # Cost and compression come from the proxy's own counters.
    default = report["policies"]["default"]
    assert default["summarizer"]["calls"] == provider.summaries > 0
    assert default["summarizer"]["input_tokens"] > 0 < default["summarizer"]["output_tokens"]
    assert 0 < default["compression_ratio"] < 0.5
    assert report["policies"]["drop"]["summarizer"]["calls"] == 0
    assert set(report) == {"model", "judge_model", "policies", "transcripts", "answers"}
    assert list(report["policies"]) == ["default", "drop"]  # side by side, in the given order
    assert set(default) == {
        "accuracy",
        "tokens",
        "compression_ratio",
        "dollars",
        "summarizer",
        "transcripts",
    }
    assert [t["outcome"] for t in default["transcripts"]] == ["applied"] * 3
    printed = capsys.readouterr()
    assert "default" in printed.out and "drop" in printed.out and "compacted" in printed.out
    assert "asking" in printed.err  # the progress bar, on stderr
