"""Golden before/after views of realistic transcripts (tests/core/golden/*.json).

Each fixture holds a transcript, a policy and (for summarize) the summary a model would write;
``<name>.expected.json`` is what the provider would receive, one line per message. After a
deliberate change of behaviour, regenerate with ``UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from proxy.core.planner import Plan, plan
from proxy.core.policy import PolicySettings
from proxy.core.summary_message import FRAME
from proxy.core.tokens import TokenCounter
from tests.support.strategies import tool_pairs_intact

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.json") if not p.stem.endswith(".expected"))


def line(message: dict[str, Any]) -> str:
    calls = [c["function"]["name"] for c in message.get("tool_calls") or ()]
    text = str(message.get("content")).replace(FRAME + "\n\n", "")  # show the summary itself
    text = text if len(text) <= 70 else text[:67] + "..."
    return f"{message['role']}{' ' + ','.join(calls) if calls else ''}: {text}"


def after_view(case: dict[str, Any], result: Plan) -> dict[str, Any]:
    request = result.summary_request
    if request is not None and case.get("summary"):
        result = result.with_summary(case["summary"])
    return {
        "fired": list(result.fired),
        "summarized": [request.start, request.covered] if request else None,
        "cleared": list(result.cleared),
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "sent": [line(m) for m in result.messages],
    }


@pytest.mark.parametrize("name", CASES)
def test_golden(counter: TokenCounter, name: str) -> None:
    case = json.loads((GOLDEN / f"{name}.json").read_text())
    first = plan(
        case["messages"],
        PolicySettings(**case["policy"]),
        model="gpt-4o",
        counter=counter,
        model_info=None,
        prior=None,
    )
    view = after_view(case, first)
    expected_path = GOLDEN / f"{name}.expected.json"
    if os.environ.get("UPDATE_GOLDEN"):
        expected_path.write_text(json.dumps(view, indent=1) + "\n")
    assert view == json.loads(expected_path.read_text())
    assert view["tokens_after"] < view["tokens_before"]  # each case is one that compacts
    assert tool_pairs_intact(first.messages)


def test_all_three_transcripts_are_present() -> None:
    assert CASES == ["coding_agent", "long_chat", "rag_session"]
