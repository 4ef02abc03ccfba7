"""``compaction-proxy eval`` reports dollars beside accuracy: each policy's prompts
and summaries priced with prompt caching, against the same turns sent direct; and the new default
(with its price trigger) answers at least as well as the old one on the built-in transcripts."""

from __future__ import annotations

from pathlib import Path

from proxy.tools.evaluation.synthetic import builtin_transcripts
from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream
from tests.tools.evaluation.command import POLICIES, run_eval, write_config
from tests.tools.evaluation.provider import ANSWERER, SUMMARIZER, EvalProvider
from tests.tools.evaluation.test_eval_command import SIZE_ARGS

PRICE = {"input": 2.0, "cached_input": 0.5, "output": 8.0}  # gpt-4.1's
PRICING = {"models": {ANSWERER: PRICE, SUMMARIZER: PRICE}}


def test_each_policy_is_priced_against_sending_direct(tmp_path: Path, mock: MockUpstream) -> None:
    EvalProvider(mock, answers={}, keep=frozenset())
    policies = {**POLICIES, "untouched": {"strategy": "off"}}
    report = run_eval(
        tmp_path,
        write_config(tmp_path, mock, policies, pricing=PRICING),
        "--policy",
        "default",
        "--policy",
        "untouched",
        *SIZE_ARGS,
    )
    compacted = report["policies"]["default"]["dollars"]
    untouched = report["policies"]["untouched"]["dollars"]

    assert untouched["direct"] == compacted["direct"] > 0  # the same turns, sent direct
    assert untouched["spent"] == untouched["direct"] and untouched["summarizer"] == 0
    assert untouched["vs_direct"] == 1.0
    assert compacted["summarizer"] > 0  # summaries were made, and priced
    assert compacted["vs_direct"] == round(
        (compacted["spent"] + compacted["summarizer"]) / compacted["direct"], 4
    )


def test_an_unpriced_model_reports_no_dollars(tmp_path: Path, mock: MockUpstream) -> None:
    EvalProvider(mock, answers={}, keep=frozenset())
    path = tmp_path / "proxy.yaml"
    path.write_text(config_yaml(provider=mock.url, summarizer={"model": SUMMARIZER}))
    report = run_eval(tmp_path, str(path), "--policy", "default", *SIZE_ARGS)
    assert report["policies"]["default"]["dollars"] is None


def test_the_new_default_answers_at_least_as_well_as_the_old(
    tmp_path: Path, mock: MockUpstream
) -> None:
    """The default policy as shipped (price trigger on) and with the token thresholds only (as
    before the price trigger), priced, with an 8k window so that the window's trigger fires on
    these transcripts."""
    transcripts = builtin_transcripts(rounds=30, turns=20, documents=6)
    probes = [p for t in transcripts for p in t.probes]
    EvalProvider(mock, answers={p.question: p.answer for p in probes}, keep=frozenset())
    policies = {"default": {}, "thresholds": {"trigger": {"pays": False}}}
    report = run_eval(
        tmp_path,
        write_config(tmp_path, mock, policies, pricing=PRICING),
        "--policy",
        "default",
        "--policy",
        "thresholds",
        "--context-window",
        "8000",
        *SIZE_ARGS,
    )
    new = report["policies"]["default"]["accuracy"]["overall"]["compacted"]
    old = report["policies"]["thresholds"]["accuracy"]["overall"]["compacted"]
    assert new >= old
