"""Probes: the questions asked of a compacted history, and how they are made for a user's own
transcripts.

A probe has a category (what users complain compaction loses), a question, and either a known
answer (scored by normalised match) or evidence from the transcript for the judge model to score
against. Built-in transcripts plant their probes (``synthetic``); a user's transcripts get
probes made from them here: by the judge model when there is one, and always from the
identifiers (paths, URLs, numbers, ids) of their early turns, as fill-in-the-blank questions
whose answer is the identifier.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from proxy.tools.evaluation.proxy_parts import content_text, identifiers

CATEGORIES = ("fact", "artifact", "decision", "instruction", "next_step")
# Identifiers are taken from the first part of a conversation: what a compaction summarizes.
EARLY_FRACTION = 0.5
_CLOZE_CONTEXT = 90  # characters either side of the blanked identifier
_BLANK = "____"
_PATH_LIKE = re.compile(r"/|\.[a-z]{1,4}$")


@dataclass(frozen=True)
class Probe:
    """One question about a transcript. ``answer``: known, matched in the reply; None: the
    judge scores the reply against ``evidence``."""

    category: str
    question: str
    answer: str | None = None
    evidence: str | None = None
    planted: int | None = None  # message index holding the answer, when known

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "question": self.question,
            "answer": self.answer,
            "planted": self.planted,
        }


def identifier_probes(messages: list[dict[str, Any]], *, limit: int) -> list[Probe]:
    """Fill-in-the-blank probes for identifiers first seen in the early turns (user, assistant
    and tool content), at most ``limit``, spread over the early part. Paths are artifacts,
    everything else (URLs, numbers, ids) facts."""
    early = max(1, int(len(messages) * EARLY_FRACTION))
    seen: set[str] = set()
    found: list[Probe] = []
    for index, message in enumerate(messages[:early]):
        if message.get("role") in ("system", "developer"):
            continue  # the preamble is never compacted: nothing to learn from it
        text = content_text(message.get("content"))
        for value in identifiers(text):
            if value in seen or len(value) < 4:
                continue
            seen.add(value)
            at = text.find(value)
            before = text[max(0, at - _CLOZE_CONTEXT) : at]
            after = text[at + len(value) : at + len(value) + _CLOZE_CONTEXT]
            if value in before or value in after:
                continue  # the blank would give itself away
            snippet = " ".join(f"{before}{_BLANK}{after}".split())
            category = "artifact" if _PATH_LIKE.search(value) else "fact"
            question = (
                f'Earlier in this conversation a {message.get("role")} message said: "…{snippet}…" '
                f"What exactly stood where {_BLANK} is? Answer with that value only."
            )
            found.append(Probe(category, question, answer=value, planted=index))
    if len(found) <= limit:
        return found
    step = len(found) / limit
    return [found[int(i * step)] for i in range(limit)]


JUDGE_PROBES_PROMPT = """You write evaluation questions about a conversation log between a user \
and an AI assistant. Each question must be answerable from the log alone, about something stated \
early in it that the assistant would need later. Write up to {count} questions, spread over these \
categories: fact (names, numbers, ids, URLs), artifact (files or documents touched and their \
latest state), decision (what was decided and why), instruction (the user's standing \
instructions), next_step (what should happen next). Reply with one JSON object per line, nothing \
else: {{"category": "...", "question": "...", "answer": "..."}} where answer is the correct \
answer, short."""


def parse_judge_probes(text: str, *, limit: int) -> list[Probe]:
    """The judge's probe lines; lines that are not a well-formed probe are skipped."""
    probes: list[Probe] = []
    for line in text.splitlines():
        line = line.strip().strip(",")
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        category, question, answer = (data.get(k) for k in ("category", "question", "answer"))
        if category not in CATEGORIES or not isinstance(question, str) or not question.strip():
            continue
        if not isinstance(answer, str) or not answer.strip():
            continue
        # The judge's own answer is evidence for its later scoring, not a string to match.
        probes.append(Probe(category, question.strip(), evidence=answer.strip()))
        if len(probes) == limit:
            break
    return probes
