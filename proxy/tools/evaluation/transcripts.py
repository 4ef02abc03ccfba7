"""Transcripts: a conversation to replay, with the probes to ask about it; and reading a user's
own transcripts from JSONL.

The JSONL format is what the proxy records (``record.path``) and what most gateways log: one
chat completions request body per line. Lines are grouped into conversations by a
``conversation`` field, else an ``X-Conversation-Id`` field, else by their opening (the messages
up to and including the first user message, as the proxy's ``conversation.missing: auto``
does); the line with the most messages holds the whole history and is the one replayed (the
proxy sees the same growing prefix turn by turn).
"""

from __future__ import annotations

import glob
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.config.store import DEFAULT_CONVERSATION_HEADERS
from proxy.errors import InvalidRequest
from proxy.tools.evaluation.probes import Probe

# A record names its conversation by a field, or by the proxy's own header as a field.
CONVERSATION_HEADER = DEFAULT_CONVERSATION_HEADERS[0]
_GROUP_FIELDS = ("conversation", CONVERSATION_HEADER, CONVERSATION_HEADER.lower())
_OPENING_DIGITS = 12


@dataclass(frozen=True)
class Transcript:
    name: str
    messages: list[dict[str, Any]]
    probes: tuple[Probe, ...] = ()
    tools: list[dict[str, Any]] | None = None
    source: str = "builtin"  # "builtin" or the file it was read from


def expand_paths(patterns: list[str]) -> list[Path]:
    """Paths and glob patterns (quoted ones reach us unexpanded), in order, deduplicated."""
    paths: list[Path] = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise InvalidRequest(f"no transcript file matches {pattern}")
        paths += [Path(p) for p in matched if Path(p) not in paths]
    return paths


def read_jsonl(path: Path) -> list[Transcript]:
    """The conversations of one JSONL file; InvalidRequest naming the line when one is bad."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}") from exc
    longest: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as exc:
            raise InvalidRequest(f"{path}, line {number}: not valid JSON: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise InvalidRequest(f"{path}, line {number}: expected a request body with messages")
        key = next((str(body[f]) for f in _GROUP_FIELDS if body.get(f)), None)
        key = key or _opening(body["messages"])
        if key not in longest or len(body["messages"]) >= len(longest[key]["messages"]):
            longest[key] = body
    transcripts = []
    for key, body in longest.items():
        transcripts.append(
            Transcript(
                name=f"{path.stem}:{key}",
                messages=body["messages"],
                tools=body.get("tools"),
                source=str(path),
            )
        )
    return transcripts


def _opening(messages: list[Any]) -> str:
    """A name for an ungrouped conversation: a digest of its messages up to the first user's."""
    end = next(
        (i + 1 for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"),
        len(messages),
    )
    data = json.dumps(messages[:end], sort_keys=True, ensure_ascii=False).encode()
    return "opening-" + hashlib.sha256(data).hexdigest()[:_OPENING_DIGITS]
