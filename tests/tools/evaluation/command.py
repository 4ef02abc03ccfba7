"""``compaction-proxy eval`` run as a user runs it: a config file, the command, its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.cli import main
from tests.support.config import config_yaml
from tests.support.mock_upstream import MockUpstream
from tests.tools.evaluation.provider import ANSWERER, SUMMARIZER

# Every 12 messages: ``default`` summarizes, ``drop`` forgets; the newest interaction is kept.
EVERY_TWELVE = {"trigger": {"context_fraction": 0, "messages": 12}, "keep": {"interactions": 1}}
POLICIES = {
    "default": {"strategy": "summarize", "mode": "inline", **EVERY_TWELVE},
    "drop": {"strategy": "neuralyze", **EVERY_TWELVE},
}


def write_config(
    tmp_path: Path, mock: MockUpstream, policies: dict[str, Any] = POLICIES, **sections: Any
) -> str:
    """The proxy's config file for ``eval`` against ``mock`` (``sections``: more of it, e.g.
    ``pricing``); its path."""
    path = tmp_path / "proxy.yaml"
    summarizer = {"model": SUMMARIZER, "max_summary_tokens": 512}
    text = config_yaml(provider=mock.url, summarizer=summarizer, policies=policies, **sections)
    path.write_text(text)
    return str(path)


def run_eval(tmp_path: Path, config: str, *args: str) -> dict[str, Any]:
    """Run ``eval`` as a user would; the JSON report it wrote."""
    out = tmp_path / "report.json"
    code = main(["eval", "--config", config, "--model", ANSWERER, "--out", str(out), *args])
    assert code == 0
    return json.loads(out.read_text())
