"""``eval --recall``: on the coding-agent transcript with aggressive clearing (tool
results older than two rounds stubbed, old rounds summarized), the mock answerer, which answers
only from what it was sent and fetches back every original in sight when the recall tool is
offered, answers with recall at least 95% as well as with the full history, and better than on
the compacted history without it."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.tools.evaluation.synthetic import coding_agent
from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream
from tests.tools.evaluation.command import run_eval
from tests.tools.evaluation.provider import SUMMARIZER, EvalProvider

ROUNDS = 60
CLEARING = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"context_fraction": 0, "messages": 40},
    "keep": {"messages": 12},
    "clear_tool_results": {"older_than_rounds": 2},
}


def test_recall_answers_what_clearing_and_summaries_removed(
    tmp_path: Path, mock: MockUpstream, capsys
) -> None:
    transcript = coding_agent(rounds=ROUNDS)
    answers = {p.question: p.answer for p in transcript.probes}
    provider = EvalProvider(mock, answers=answers)  # keeps nothing: the summary loses it all
    path = tmp_path / "proxy.yaml"
    summarizer = {"model": SUMMARIZER, "max_summary_tokens": 512}
    path.write_text(
        config_yaml(provider=mock.url, summarizer=summarizer, policies={"clearing": CLEARING})
    )
    report = run_eval(
        tmp_path,
        str(path),
        "--policy",
        "clearing",
        "--builtin",
        "coding-agent",
        "--agent-rounds",
        str(ROUNDS),
        "--recall",
    )
    overall = report["policies"]["clearing"]["accuracy"]["overall"]
    # The probes whose answer compaction removed: every one answered with recall.
    by = {(a["question"], a["variant"]): a["correct"] for a in report["answers"]}
    lost = [q for q in answers if not by[(q, "compacted")]]
    printed = capsys.readouterr().out
    with capsys.disabled():  # the figure (pytest -s shows it)
        print("\nrecall figure (all probes):", json.dumps(overall))
        recalled = sum(by[(q, "recalled")] for q in lost)
        print(f"probes compaction lost: {len(lost)}, answered with recall: {recalled}")
    assert report["policies"]["clearing"]["transcripts"][0]["outcome"] == "applied"
    assert overall["full"] == 1.0
    assert overall["compacted"] < overall["full"]  # compaction lost answers ...
    assert overall["recalled_vs_full"] >= 0.95  # ... which recall brings back
    # The probes whose answer compaction removed: every one answered with recall.
    assert lost and all(by[(q, "recalled")] for q in lost), lost
    # It was the recall tool: the answerer received originals as the results of its calls.
    fetched = [
        m["content"]
        for r in mock.chat_requests()
        for m in r.json()["messages"]
        if m.get("role") == "tool" and str(m.get("tool_call_id", "")).startswith("call_recall_")
    ]
    assert any(answers[q] in text for q in lost for text in fetched)
    assert provider.summaries > 0
    assert "with recall" in printed
