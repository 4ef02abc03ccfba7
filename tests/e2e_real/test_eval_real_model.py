"""``compaction-proxy eval`` against the real small model (SmolLM2-135M, n_ctx 1024): plumbing,
not quality. The model answers, summarizes and is scored through the whole command; a 135M model
answers few probes right, so nothing here looks at the accuracies' values.

Run: ``make e2e-real`` (or ``E2E_REAL=1 .venv/bin/python -m pytest tests/e2e_real -v``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from tests.e2e_real.llama import MODEL_ALIAS, REAL_MODEL, LlamaServer
from tests.support.config import config_yaml

pytestmark = pytest.mark.e2e_real

# The real-model suite's summarizer and model table; one policy that compacts everything but the
# question. Tiny transcripts: the full history and a question must fit SmolLM2's 1024-token
# window (its tokenizer needs somewhat more tokens than o200k_base, which the proxy counts with).
POLICY = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"context_fraction": 0, "messages": 8},
    "keep": {"interactions": 1},
}


def test_eval_runs_against_a_real_model(
    model: LlamaServer,
    tmp_path: Path,
) -> None:
    config = tmp_path / "proxy.yaml"
    # Only POLICY: the suite's other policies are left out.
    config.write_text(
        config_yaml({**REAL_MODEL, "policies": {"default": POLICY}}, provider=model.url)
    )
    out = tmp_path / "report.json"
    small = ["--builtin", "long-chat", "--chat-turns", "6", "--max-answer-tokens", "24",
             "--concurrency", "1"]  # fmt: skip
    args = ["eval", "--config", str(config), "--model", MODEL_ALIAS, *small, "--out", str(out)]
    code = main(args)
    assert code == 0
    report = json.loads(out.read_text())
    policy = report["policies"]["default"]
    assert policy["accuracy"]["overall"]["probes"] == 10
    for variant in ("full", "compacted", "truncated"):
        assert 0.0 <= policy["accuracy"]["overall"][variant] <= 1.0
    assert policy["summarizer"]["calls"] >= 1  # the real model wrote the summary
    assert policy["transcripts"][0]["outcome"] == "applied"
    assert policy["compression_ratio"] < 1
    assert len(report["answers"]) == 30
    assert all(isinstance(a["reply"], str) for a in report["answers"])
