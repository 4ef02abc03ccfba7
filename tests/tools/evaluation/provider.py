"""A mock provider whose answers are known, so the evaluation's scoring can be checked exactly.

On top of MockUpstream (a real server): the summarizer (``mock-summarizer``) is extractive: its
summary is the lines of what it is given that hold one of the ``keep`` strings; the model under
test (``mock-answerer``) answers a probe correctly iff the answer is somewhere in the history it
was sent (before the question); the judge (``mock-judge``) writes probes from the ``probes`` it
is given, and grades an answer 1 iff it contains the reference.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.tools.evaluation.scoring import normalise
from tests.support.config import SUMMARIZER_MODEL
from tests.support.mock_upstream import (
    ChatScript,
    MockUpstream,
    Reply,
    completion,
    json_reply,
)
from tests.support.recall_model import chat_calls, declares, recall_step

SUMMARIZER = SUMMARIZER_MODEL
ANSWERER = "mock-answerer"
JUDGE = "mock-judge"
DONT_KNOW = "I don't know."
_REFERENCE = re.compile(r"Reference: (.*)\nAnswer: (.*)", re.S)


class EvalProvider(ChatScript):
    def __init__(
        self,
        mock: MockUpstream,
        *,
        answers: dict[str, str],
        keep: frozenset[str] = frozenset(),
        judge_probes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(mock)
        self.answers = answers  # question -> answer
        self.keep = keep
        self.judge_probes = judge_probes or []
        self.summaries = 0
        self.questions: list[tuple[str, list[dict[str, Any]]]] = []  # (question, history)

    def chat(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if body["model"] == SUMMARIZER:
            return self._summary(messages[-1]["content"])
        if body["model"] == JUDGE:
            return self._judge(messages)
        if messages[-1]["role"] != "user":  # after a recall round: the question is further up
            return self._recalling(body)
        question = messages[-1]["content"]
        history = messages[:-1]
        with self._lock:
            self.questions.append((question, history))
        answer = next((a for q, a in self.answers.items() if question.startswith(q)), None)
        seen = json.dumps(history, ensure_ascii=False)
        if answer is not None and answer not in seen and declares(body.get("tools")):
            return self._recalling(body)
        reply = f"It is {answer}." if answer is not None and answer in seen else DONT_KNOW
        return json_reply(completion(reply, model=body["model"]))

    def _recalling(self, body: dict[str, Any]) -> Reply:
        """With the recall tool offered, the answerer fetches every original in sight it has not
        fetched yet (tests/support/recall_model.py), then answers from what it got back."""
        messages = body["messages"]
        question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        answer = next((a for q, a in self.answers.items() if question.startswith(q)), None)
        offered = declares(body.get("tools")) and body.get("tool_choice") != "none"
        step = recall_step(messages, answer or "\x00", tool_offered=offered, question=question)
        if step.ids:
            return json_reply(completion("", model=body["model"], tool_calls=chat_calls(step)))
        reply = f"It is {answer}." if step.text and step.text != DONT_KNOW else DONT_KNOW
        return json_reply(completion(reply, model=body["model"]))

    def _summary(self, data: str) -> Reply:
        with self._lock:
            self.summaries += 1
        lines = [
            line.strip()
            for line in data.splitlines()
            if any(k in line for k in self.keep) and not line.startswith(("<<<", "TRANSCRIPT-"))
        ]
        text = "\n".join(dict.fromkeys(lines)) or "Nothing worth keeping."
        return json_reply(completion(text, model=SUMMARIZER))

    def _judge(self, messages: list[dict[str, Any]]) -> Reply:
        if messages[0]["content"].startswith("You write evaluation questions"):
            text = "\n".join(json.dumps(p) for p in self.judge_probes)
            return json_reply(completion(text, model=JUDGE))
        found = _REFERENCE.search(messages[-1]["content"])
        assert found is not None, messages[-1]["content"]
        reference, answer = found.groups()
        good = normalise(reference) in normalise(answer)
        return json_reply(completion(f"Compared.\nSCORE: {int(good)}", model=JUDGE))
