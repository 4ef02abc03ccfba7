"""The public agent sessions the cost bench plays: each fixture loads as a well-formed
conversation a provider would accept, and its README row says what it holds."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from tests.bench.cost.fixtures.convert import chatgpt, opencode
from tests.bench.cost.transcripts import FIXTURES, public_transcripts

ROLES = {"system", "user", "assistant", "tool"}
FILES = sorted(FIXTURES.glob("*.json.gz"))


def _readme_rows() -> dict[str, list[str]]:
    """The README table's cells, by fixture file name."""
    rows = {}
    for line in (FIXTURES / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(.+\.json\.gz)`", cells[0])
        if name:
            rows[name.group(1)] = cells
    return rows


def _unanswered(messages: list[dict]) -> list[str]:
    """Tool calls without a result before the next turn, and results that answer no call (the
    last answer's calls are in no prompt the bench sends, so nothing has to answer them)."""
    problems, open_calls = [], set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in open_calls:
                problems.append(f"result for no call: {message['tool_call_id']}")
            open_calls.discard(message["tool_call_id"])
            continue
        problems.extend(f"call without a result: {c}" for c in sorted(open_calls))
        open_calls = {c["id"] for c in message.get("tool_calls") or ()}
    return problems


def test_every_fixture_is_played() -> None:
    assert len(public_transcripts()) == len(FILES) >= 9


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_fixture_is_a_conversation_a_provider_accepts(path: Path) -> None:
    data = json.loads(gzip.decompress(path.read_bytes()))
    messages = data["messages"]
    assert {m["role"] for m in messages} <= ROLES
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "assistant"
    assert all(m["role"] != "system" for m in messages[1:])
    assert _unanswered(messages) == []
    named = {t["function"]["name"] for t in data["tools"]}
    assert {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()} <= named


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_fixture_is_what_its_name_and_readme_row_say(path: Path) -> None:
    data = json.loads(gzip.decompress(path.read_bytes()))
    answers = sum(1 for m in data["messages"] if m["role"] == "assistant")
    assert data["name"].endswith(f"({answers})")
    row = _readme_rows()[path.name]
    assert int(row[2]) == answers
    assert path.stat().st_size < 200_000  # well under the 1 MB a fixture may take


def test_an_opencode_export_becomes_answers_each_followed_by_its_results(tmp_path: Path) -> None:
    def part(kind: str, **fields: object) -> dict:
        return {"type": kind, **fields}

    def tool(call: str, status: str, **state: object) -> dict:
        return part("tool", callID=call, tool="bash", state={"status": status, **state})

    export = {
        "info": {"id": "ses_1"},
        "messages": [
            {
                "info": {"role": "user"},
                "parts": [
                    part("text", text="fix the build"),
                    part("file", mime="application/x-directory", filename="src"),
                    part("text", text="Called the Read tool on src", synthetic=True),
                    part("text", text="not sent", ignored=True),
                ],
            },
            {
                "info": {"role": "assistant"},
                "parts": [
                    part("step-start"),
                    part("reasoning", text="thinking"),
                    part("text", text="Running both."),
                    tool("c1", "completed", input={"command": "make"}, output="ok"),
                    tool("c2", "error", input={"command": "make test"}, error="exit 2"),
                    tool("c3", "running", input={"command": "sleep 9"}),
                    part("step-finish"),
                ],
            },
            {"info": {"role": "assistant"}, "parts": [part("text", text="Done.")]},
        ],
    }
    source = tmp_path / "export.json"
    source.write_text(json.dumps(export), encoding="utf-8")

    messages = opencode(source)

    assert [m["role"] for m in messages] == [
        *("system", "user", "assistant"),
        *("tool", "tool", "tool", "assistant"),
    ]  # each call answered before the next answer, even the one the session never finished
    assert messages[1]["content"] == "fix the build\nCalled the Read tool on src"
    assert messages[2]["content"] == "Running both."
    assert [c["function"]["arguments"] for c in messages[2]["tool_calls"]] == [
        '{"command": "make"}',
        '{"command": "make test"}',
        '{"command": "sleep 9"}',
    ]
    assert [m["content"] for m in messages[3:6]] == [
        "ok",
        "exit 2",
        "(the tool call was interrupted)",
    ]
    assert _unanswered(messages) == []


def test_a_chatgpt_conversation_is_the_thread_its_user_last_saw(tmp_path: Path) -> None:
    def node(parent: str | None, role: str, *parts: str) -> dict:
        message = {"author": {"role": role}, "content": {"content_type": "text", "parts": parts}}
        return {"parent": parent, "message": message}

    mapping = {
        "root": {"parent": None, "message": None},
        "sys": node("root", "system", ""),
        "q1": node("sys", "user", "Convert this PHP."),
        "old": node("q1", "assistant", "A first answer, regenerated away."),
        "a1": node("q1", "assistant", "Here is the first half"),
        "a1b": node("a1", "assistant", ", and the rest."),
        "q2": node("a1b", "user", "Thanks. And the template?"),
        "a2": node("q2", "assistant", "Use extends."),
    }
    export = [
        {"id": "other", "mapping": {}, "current_node": None},
        {"id": "c1", "mapping": mapping, "current_node": "a2"},
    ]
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(export), encoding="utf-8")

    messages = chatgpt(source, "c1")

    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "Convert this PHP."),
        ("assistant", "Here is the first half, and the rest."),
        ("user", "Thanks. And the template?"),
        ("assistant", "Use extends."),
    ]
    assert messages[0]["role"] == "system"
