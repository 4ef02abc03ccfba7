"""The bench's three transcripts, seeded and deterministic, with the pace they were played at.

- ``coding_agent``: one task, then 150 tool rounds (file reads, greps, diffs, test and build
  output of 300-3,000 tokens; test runs start passing after a while, builds fail half the time:
  what config/examples/coding-agent.yaml's tool triggers look at). It ends near 190k tokens of a
  200k window: over the default trigger (0.8 x 200k), under the window.
- ``multi_task_agent``: 8 tasks of 15 tool rounds, each task closed by a passing test run and a
  short report. It ends at about 151k tokens: past the default policy's soft threshold
  (0.8 x 160k), short of its trigger, so an ahead-of-time summary is paid for and never used.
- ``long_chat``: 80 turns of questions (now and then a pasted document) and long answers, about
  110k tokens: under the default soft threshold, over coding-agent.yaml's interaction_tokens.

Sizes are drawn log-uniform in their range and then scaled together so the transcript ends at
its planned size; the words are filler (the provider's answers do not depend on them). The pace:
an agent asks every 20-60 s, a chat user every 1-3 min, and each transcript has a few pauses
longer than a cache's 5 minutes. The generators are not proxy/tools/evaluation/synthetic.py's: those
plant probe answers in small tool outputs; cost needs realistic sizes and a clock instead.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken

_NOUNS = ("order", "payment", "invoice", "session", "cache", "queue", "worker", "client", "record",
          "index", "token", "account", "ledger", "report", "schedule", "batch", "event", "policy",
          "router", "handler", "config", "buffer", "limit", "retry", "timeout", "parser")  # fmt: skip
_VERBS = ("load", "save", "parse", "check", "build", "send", "fetch", "merge", "split", "apply",
          "reset", "render", "update", "validate", "resolve", "flush", "encode", "compute")  # fmt: skip
_WORDS = ("the", "a", "we", "it", "this", "that", "should", "could", "because", "when", "after",
          "before", "then", "also", "still", "only", "more", "less", "first", "next", "plan",
          "guest", "venue", "budget", "week", "morning", "evening", "friends", "family", "music",
          "garden", "weather", "travel", "train", "hotel", "dinner", "menu", "price", "option",
          "idea", "detail", "question", "answer", "choice", "reason", "simple", "quiet", "early",
          "late", "cheap", "warm", "small", "large", "local", "nearby", "book", "call", "check",
          "decide", "prefer", "suggest", "remember", "compare", "keep", "avoid", "bring", "arrive",
          "leave", "invite", "order", "table", "room", "hall", "card", "gift", "cake", "is", "are",
          "was", "will", "can", "and", "or", "but", "so", "with", "for", "of", "in", "on", "at",
          "to", "from", "by", "about", "around", "every", "each", "some")  # fmt: skip
_PACKAGES = ("billing", "gateway", "ledger", "scheduler", "notify", "storage")


def _function(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    k: {"type": "string", "description": v} for k, v in properties.items()
                },
                "required": list(properties),
            },
        },
    }


AGENT_TOOLS = [
    _function(
        "read_file",
        "Read a file of the repository, with line numbers. Large files are "
        "returned whole; read only what you need.",
        path="Path from the repository root.",
    ),
    _function(
        "grep",
        "Search the repository for a regular expression; returns path:line: text for every match.",
        pattern="A Python regular expression.",
        path="A folder.",
    ),
    _function(
        "edit_file",
        "Replace a unique snippet of a file with new text and return the resulting diff.",
        path="The file.",
        old="The exact text to replace.",
        new="The replacement.",
    ),
    _function(
        "run_tests",
        "Run the test suite (pytest) or a part of it; returns its output.",
        target="A test path or node id; empty for the whole suite.",
    ),
    _function(
        "run_build",
        "Build the package and type-check it (mypy); returns the output.",
        target="The package to build.",
    ),
]


@dataclass(frozen=True)
class Turn:
    """One request: the prompt is ``messages[:answer]``, the model's answer ``messages[answer]``."""

    at: float  # simulated seconds since the transcript began
    answer: int


@dataclass(frozen=True)
class Transcript:
    """A conversation in chat-completions shape (``messages[0]`` is the system prompt); every
    assistant message is one model answer, asked for at ``times[k]`` (the k-th answer)."""

    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    times: tuple[float, ...]

    def turns(self) -> Iterator[Turn]:
        answers = [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]
        for at, answer in zip(self.times, answers, strict=True):
            yield Turn(at, answer)


class _Writer:
    """Filler text of a wanted size, of a few kinds, from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._count = tiktoken.get_encoding("o200k_base").encode_ordinary

    def _lines(self, tokens: int, line: Callable[[int], str]) -> str:
        out: list[str] = []
        used = 0
        while used < tokens:
            text = line(len(out))
            out.append(text)
            used += len(self._count(text))  # the newline mostly merges with what follows
        return "\n".join(out)

    def name(self) -> str:
        return f"{self.rng.choice(_VERBS)}_{self.rng.choice(_NOUNS)}"

    def path(self, folder: str = "src") -> str:
        return f"{folder}/{self.rng.choice(_PACKAGES)}/{self.rng.choice(_NOUNS)}.py"

    def code_line(self) -> str:
        r = self.rng
        noun = lambda: r.choice(_NOUNS)  # noqa: E731
        shapes = (
            lambda: (
                f"def {self.name()}(self, {noun()}: {r.choice(('int', 'str', 'dict'))}) -> None:"
            ),
            lambda: (
                f"    {noun()} = self._{noun()}.{self.name()}({noun()}, timeout={r.randint(1, 90)})"
            ),
            lambda: f"    if {noun()} is None or {noun()}.{noun()} > {r.randint(2, 500)}:",
            lambda: (
                f'        raise {r.choice(("ValueError", "KeyError"))}("{noun()} not {r.choice(_VERBS)}ed")'
            ),
            lambda: f"    return {self.name()}({noun()}, {noun()}=True)",
            lambda: (
                f"    # {r.choice(_VERBS)} the {noun()} before the {noun()} is {r.choice(_VERBS)}ed"
            ),
            lambda: f"class {noun().title()}{noun().title()}:",
        )
        return r.choice(shapes)()

    def code(self, n: int) -> str:
        return self._lines(n, lambda k: f"{k + 1:5d}  {self.code_line()}")

    def diff(self, path: str, n: int) -> str:
        start = self.rng.randint(10, 400)
        head = (
            f"Applied 1 edit to {path}:\n--- a/{path}\n+++ b/{path}\n@@ -{start},14 +{start},17 @@"
        )
        lines = self._lines(n - 40, lambda k: self.rng.choice("  -+") + self.code_line())
        return f"{head}\n{lines}"

    def grep(self, n: int) -> str:
        return self._lines(
            n, lambda k: f"{self.path()}:{self.rng.randint(1, 900)}:{self.code_line()}"
        )

    def tests(self, n: int, *, passed: bool) -> str:
        r = self.rng
        head = (
            "============================= test session starts ==============================\n"
            f"platform linux -- Python 3.12.3, pytest-8.3.2\ncollected {r.randint(40, 400)} items\n"
        )
        lines = self._lines(
            n - 80,
            lambda k: (
                f"tests/test_{r.choice(_NOUNS)}.py::test_{self.name()} PASSED  [{k % 100:3d}%]"
            ),
        )
        seconds = f"{r.uniform(1, 40):.2f}s"
        if passed:
            return f"{head}{lines}\n========== {r.randint(40, 400)} passed in {seconds} =========="
        failures = (
            "=================================== FAILURES ===================================\n"
            f"____ test_{self.name()} ____\n>       assert {self.name()}() == {r.randint(1, 99)}\n"
            f"E       AssertionError: assert {r.randint(100, 999)} == {r.randint(1, 99)}"
        )
        return (
            f"{head}{lines}\n{failures}\n"
            f"===== {r.randint(1, 6)} failed, {r.randint(40, 400)} passed in {seconds} ====="
        )

    def build(self, n: int, *, ok: bool) -> str:
        r = self.rng
        if ok:
            lines = self._lines(n - 20, lambda k: f"  adding '{self.path()}'")
            return f"Building wheel for payments (pyproject.toml) ...\n{lines}\nBuild succeeded."
        lines = self._lines(
            n - 30,
            lambda k: (
                f"{self.path()}:{r.randint(1, 900)}:{r.randint(1, 60)}: error: Incompatible "
                f'types in assignment (expression has type "{r.choice(_NOUNS).title()}", variable '
                f'has type "str")  [assignment]'
            ),
        )
        return f"error: build failed\n{lines}\nFound {r.randint(2, 30)} errors in 4 files"

    def prose(self, n: int) -> str:
        def sentence(k: int) -> str:
            words = self.rng.choices(_WORDS, k=self.rng.randint(8, 20))
            return " ".join(words).capitalize() + "."

        text = self._lines(n, sentence)
        return text.replace(".\n", ". ", 3)


def _sizes(rng: random.Random, count: int, low: int, high: int) -> list[float]:
    return [math.exp(rng.uniform(math.log(low), math.log(high))) for _ in range(count)]


def _scaled(sizes: list[float], total: int, low: int, high: int) -> list[int]:
    """``sizes`` scaled to add up to about ``total``, each kept within [low, high]."""
    factor = total / sum(sizes)
    return [int(min(max(s * factor, low), high)) for s in sizes]


class _AgentRun:
    """Tool rounds appended to a message list, one answer time each."""

    def __init__(self, writer: _Writer, messages: list[dict[str, Any]]) -> None:
        self.w = writer
        self.messages = messages
        self.times: list[float] = []
        self.clock = 0.0

    def ask(self, gap: float) -> None:
        """The next answer is asked for ``gap`` seconds after the previous one."""
        self.clock += gap
        self.times.append(round(self.clock, 3))

    def round(self, size: int, *, tests_pass: bool, kind: str | None = None) -> None:
        w, r = self.w, self.w.rng
        kind = (
            kind
            or r.choices(
                ("read_file", "grep", "edit_file", "run_tests", "run_build"),
                weights=(35, 15, 20, 20, 10),
            )[0]
        )
        path = w.path("tests" if kind == "run_tests" else "src")
        if kind == "read_file":
            arguments, output = {"path": path}, f"{path}\n" + w.code(size)
        elif kind == "grep":
            arguments, output = {"pattern": w.name(), "path": "src"}, w.grep(size)
        elif kind == "edit_file":
            arguments = {"path": path, "old": w.code_line(), "new": w.code_line()}
            output = w.diff(path, size)
        elif kind == "run_tests":
            arguments, output = {"target": path}, w.tests(size, passed=tests_pass)
        else:
            arguments, output = {"target": "payments"}, w.build(size, ok=r.random() < 0.5)
        thought = w.prose(r.randint(15, 60)) if r.random() < 0.4 else None
        call_id = f"call_{r.getrandbits(64):016x}"
        call = {"name": kind, "arguments": json.dumps(arguments)}
        self.messages.append(
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [{"id": call_id, "type": "function", "function": call}],
            }
        )
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


def _agent_system(writer: _Writer) -> dict[str, Any]:
    rules = "\n".join(f"- {writer.prose(60)}" for _ in range(20))
    return {
        "role": "system",
        "content": "You are a coding agent working in the payments repository. Use the tools to "
        "read, search, edit, test and build the code; work step by step and keep going until the "
        f"task is done. House rules:\n{rules}",
    }


def coding_agent(*, rounds: int = 150, total: int = 190_000, seed: int = 19) -> Transcript:
    """One task, ``rounds`` tool rounds and a closing report, ending near ``total`` tokens."""
    w = _Writer(random.Random(f"coding-agent-{seed}"))
    r = w.rng
    messages = [
        _agent_system(w),
        {"role": "user", "content": "Fix the flaky checkout tests: " + w.prose(120)},
    ]
    run = _AgentRun(w, messages)
    pauses = {rounds // 3: 8 * 60, 2 * rounds // 3: 14 * 60}  # the user away: caches go cold
    sizes = _scaled(_sizes(r, rounds, 300, 3000), total - 14_000, 300, 3000)
    for n, size in enumerate(sizes):
        run.ask(pauses.get(n, r.uniform(20, 60)))
        run.round(size, tests_pass=n > rounds // 4 and r.random() < 0.35)
    run.ask(r.uniform(20, 60))
    messages.append({"role": "assistant", "content": "The tests pass now. " + w.prose(200)})
    return Transcript("coding agent", messages, AGENT_TOOLS, tuple(run.times))


def multi_task_agent(
    *, tasks: int = 8, rounds: int = 15, total: int = 151_000, seed: int = 19
) -> Transcript:
    """``tasks`` tasks of ``rounds`` tool rounds each, each closed by a passing test run and a
    short report; ends near ``total`` tokens."""
    w = _Writer(random.Random(f"multi-task-agent-{seed}"))
    r = w.rng
    messages = [_agent_system(w)]
    run = _AgentRun(w, messages)
    long_pauses = {tasks // 3, 2 * tasks // 3}  # before these tasks the user was away
    sizes = iter(_scaled(_sizes(r, tasks * rounds, 300, 3000), total - 14_000, 300, 3000))
    for task in range(tasks):
        messages.append(
            {"role": "user", "content": f"Task {task + 1}: " + w.prose(r.randint(60, 200))}
        )
        run.ask(r.uniform(10, 20) * 60 if task in long_pauses else r.uniform(60, 180))
        for n in range(rounds):
            last = n == rounds - 1
            run.round(
                next(sizes), tests_pass=last or r.random() < 0.2, kind="run_tests" if last else None
            )
            run.ask(r.uniform(20, 60))
        messages.append({"role": "assistant", "content": "Done. " + w.prose(r.randint(80, 200))})
    return Transcript("multi-task agent", messages, AGENT_TOOLS, tuple(run.times))


def long_chat(*, turns: int = 80, total: int = 110_000, seed: int = 19) -> Transcript:
    """``turns`` questions (every 8th pastes a document) and answers, ending near ``total``."""
    w = _Writer(random.Random(f"long-chat-{seed}"))
    r = w.rng
    system = "You are a friendly assistant helping to plan events. " + w.prose(400)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    questions = _sizes(r, turns, 30, 300)
    answers = _sizes(r, turns, 300, 1200)
    pasted = {k: r.uniform(1000, 2500) for k in range(5, turns, 8)}
    scale = total / (sum(questions) + sum(answers) + sum(pasted.values()))
    pauses = {turns // 4: 10 * 60, turns // 2: 25 * 60, 4 * turns // 5: 45 * 60}
    times: list[float] = []
    clock = 0.0
    for k in range(turns):
        question = w.prose(int(questions[k] * scale))
        if k in pasted:
            question += "\nHere is the draft:\n" + w.prose(int(pasted[k] * scale))
        messages.append({"role": "user", "content": question})
        clock += pauses.get(k, r.uniform(60, 180)) if k else 0.0
        times.append(round(clock, 3))
        messages.append({"role": "assistant", "content": w.prose(int(answers[k] * scale))})
    return Transcript("long chat", messages, None, tuple(times))


def transcripts(scale: float = 1.0, *, seed: int = 19) -> list[Transcript]:
    """The three transcripts; ``scale`` < 1 shortens them (and their planned sizes) together."""
    return [
        coding_agent(rounds=max(8, int(150 * scale)), total=int(190_000 * scale), seed=seed),
        multi_task_agent(tasks=max(2, int(8 * scale)), total=int(151_000 * scale), seed=seed),
        long_chat(turns=max(8, int(80 * scale)), total=int(110_000 * scale), seed=seed),
    ]


FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_TURN_SECONDS = 20.0  # a recorded session's pace is not kept: an agent asks every ~20 s


def public_transcripts(folder: Path = FIXTURES) -> list[Transcript]:
    """The public sessions of real agents shipped as fixtures (``fixtures/README.md`` names each
    source and license): ``{"name", "messages", "tools"}`` in chat-completions shape, gzipped,
    one answer every ``FIXTURE_TURN_SECONDS``."""
    found = []
    for path in sorted(folder.glob("*.json.gz")):
        data = json.loads(gzip.decompress(path.read_bytes()))
        messages = data["messages"]
        answers = sum(1 for m in messages if m["role"] == "assistant")
        times = tuple(FIXTURE_TURN_SECONDS * k for k in range(answers))
        found.append(Transcript(data["name"], messages, data.get("tools") or None, times))
    return found
