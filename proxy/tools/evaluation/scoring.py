"""Scoring a reply: a normalised match where the answer is known, else a judge model with a
fixed rubric.

The match is deliberately simple and documented (docs/evaluation.md): case, punctuation and
spacing are ignored, and the answer must appear in the reply as whole words. The judge sees the
question, the reference (evidence from the transcript) and the reply, and must end with
``SCORE: 1`` or ``SCORE: 0``; a reply it cannot parse scores 0 and is counted.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from proxy.tools.evaluation.endpoint import ChatEndpoint
from proxy.tools.evaluation.probes import Probe

_NOT_WORD = re.compile(r"[\W_]+")
_SCORE = re.compile(r"SCORE:\s*([01])\b", re.IGNORECASE)
JUDGE_MAX_TOKENS = 200

RUBRIC = """You grade one answer to a question about a conversation, against a reference. \
Score 1 if the answer states what the reference says (other wording is fine, extra detail is \
fine if it does not contradict it). Score 0 if it is wrong, contradicts the reference, is \
missing, or says it does not know or cannot tell. Reply with one short sentence of reasoning, \
then a last line that is exactly "SCORE: 1" or "SCORE: 0"."""


def normalise(text: str) -> str:
    """Lowercase, accents folded, every run of punctuation and space one space, padded."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return f" {' '.join(_NOT_WORD.sub(' ', folded.lower()).split())} "


def matches(answer: str, reply: str) -> bool:
    """The known answer appears in the reply as whole words, normalised."""
    wanted = normalise(answer)
    return wanted.strip() != "" and wanted in normalise(reply)


@dataclass(frozen=True)
class Score:
    correct: bool
    method: str  # "match" or "judge"
    judge_unparsed: bool = False


def parse_judgement(text: str) -> bool | None:
    """The last SCORE line of the judge's reply; None when there is none."""
    found = _SCORE.findall(text)
    return found[-1] == "1" if found else None


class Scorer:
    """Scores replies to probes; judge calls go to ``judge`` (None: known answers only)."""

    def __init__(self, judge: ChatEndpoint | None, *, judge_model: str | None) -> None:
        self.judge = judge
        self.judge_model = judge_model

    def can_score(self, probe: Probe) -> bool:
        return probe.answer is not None or (self.judge is not None and probe.evidence is not None)

    async def score(self, probe: Probe, reply: str) -> Score:
        if probe.answer is not None:
            return Score(matches(probe.answer, reply), "match")
        if self.judge is None or self.judge_model is None or probe.evidence is None:
            raise ValueError("a probe without a known answer needs a judge and evidence")
        verdict = await self.judge.complete(
            [
                {"role": "system", "content": RUBRIC},
                {
                    "role": "user",
                    "content": f"Question: {probe.question}\nReference: {probe.evidence}\n"
                    f"Answer: {reply}",
                },
            ],
            model=self.judge_model,
            max_tokens=JUDGE_MAX_TOKENS,
        )
        parsed = parse_judgement(verdict)
        return Score(bool(parsed), "judge", judge_unparsed=parsed is None)
