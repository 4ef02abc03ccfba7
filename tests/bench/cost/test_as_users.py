"""The users mode runs the shipped configs untouched: only where the proxy runs is set."""

from __future__ import annotations

import pytest

from proxy.config.settings import parse_settings
from tests.bench.cost.as_users import CONFIGS, config_text
from tests.bench.cost.transcripts import public_transcripts


@pytest.mark.parametrize(("name", "path"), CONFIGS)
def test_a_shipped_config_keeps_its_policies_summarizer_and_prices(name: str, path) -> None:
    shipped = parse_settings(path.read_text(encoding="utf-8"), environ={})
    run = parse_settings(config_text(path, "http://127.0.0.1:9"), environ={})
    assert run.policies == shipped.policies
    assert run.summarizer == shipped.summarizer
    assert run.pricing == shipped.pricing and run.models == shipped.models
    assert run.upstream.base_url == "http://127.0.0.1:9/v1"


def test_the_public_fixtures_load_as_transcripts() -> None:
    found = public_transcripts()
    assert len(found) >= 3
    for transcript in found:
        assert transcript.messages[0]["role"] == "system"
        assert transcript.messages[-1]["role"] == "assistant"
        assert len(list(transcript.turns())) == len(transcript.times)
