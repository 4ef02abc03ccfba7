"""The evaluation run: replay each transcript under each policy, then ask every probe three
ways (full history, compacted, truncated at the compacted size) and score the replies.

Replays run one after another (each drives a summarizer); questions run ``concurrency`` at a
time. Any failed model call stops the run with an ``EvaluationError``: a partial score would be
misleading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from proxy.economics.prices import PER_MILLION, PriceTable
from proxy.tools.evaluation.dollars import Dollars, prompts_dollars, quoted_summaries_dollars
from proxy.tools.evaluation.endpoint import ChatEndpoint
from proxy.tools.evaluation.probes import (
    JUDGE_PROBES_PROMPT,
    Probe,
    identifier_probes,
    parse_judge_probes,
)
from proxy.tools.evaluation.proxy_parts import Settings, TokenCounter, transcript_line
from proxy.tools.evaluation.recalled import ask_through_proxy
from proxy.tools.evaluation.replay import Replayed, Then, replay, request_points
from proxy.tools.evaluation.scoring import Scorer
from proxy.tools.evaluation.transcripts import Transcript
from proxy.tools.evaluation.truncation import truncate

QUESTION_SUFFIX = "Answer briefly, from this conversation only."
# How much of a user transcript the judge reads to write probes (characters, from the start).
JUDGE_PROBE_CHARS = 24_000
JUDGE_PROBE_TOKENS = 800


@dataclass(frozen=True)
class Answer:
    transcript: str
    probe: Probe
    variant: str  # full, compacted, truncated
    policy: str | None  # None for the full history (the same for every policy)
    reply: str
    correct: bool
    method: str  # match or judge
    judge_unparsed: bool = False


@dataclass(frozen=True)
class PolicyRun:
    """One transcript under one policy: what the proxy made of it, and the prompt sizes."""

    transcript: str
    policy: str
    replayed: Replayed
    tokens_full: int
    tokens_compacted: int
    tokens_truncated: int
    dollars: Dollars | None = None  # None: the model is unpriced


@dataclass(frozen=True)
class Results:
    model: str
    judge_model: str | None
    policies: tuple[str, ...]
    transcripts: tuple[Transcript, ...]
    runs: tuple[PolicyRun, ...]
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class RunOptions:
    model: str
    policies: tuple[str, ...]
    authorization: str | None  # sent with replayed requests (the summarizer may use it)
    concurrency: int = 4
    max_answer_tokens: int = 256
    user_probes: int = 10  # probes made per user transcript
    recall: bool = False  # also ask each probe through the proxy, the recall tool offered


Progress = Callable[[str, int], None]  # (task, advance)


class Runner:
    def __init__(
        self,
        settings: Settings,
        options: RunOptions,
        *,
        answerer: ChatEndpoint,
        scorer: Scorer,
        progress: Progress = lambda task, n: None,
        live: Any = None,
    ) -> None:
        self.settings = settings
        self.live = live  # the model under test as the proxy's upstream (eval --recall)
        self.options = options
        self.answerer = answerer
        self.scorer = scorer
        self.progress = progress
        self.counter = TokenCounter(settings.model_table())
        self._slots = asyncio.Semaphore(options.concurrency)

    # --- sizes, for the progress bar ---------------------------------------------------------

    def replay_requests(self, transcripts: list[Transcript]) -> int:
        per = sum(len(request_points(t.messages)) + 1 for t in transcripts)
        return per * len(self.options.policies)

    def questions(self, transcripts: list[Transcript]) -> int:
        """Model calls to answer every probe: full once, compacted and truncated per policy (and
        recalled, with ``recall``)."""
        probes = sum(sum(map(self.scorer.can_score, t.probes)) for t in transcripts)
        return probes * (1 + (3 if self._recalling else 2) * len(self.options.policies))

    @property
    def _recalling(self) -> bool:
        return self.options.recall and self.live is not None

    # --- the run -----------------------------------------------------------------------------

    async def run(self, prepared: list[Transcript]) -> Results:
        """Replay and ask; ``prepared``: transcripts with their probes (see ``with_probes``)."""
        runs: list[PolicyRun] = []
        recalled: list[Awaitable[Answer]] = []
        prompts: list[tuple[Transcript, str, str | None, list[dict[str, Any]]]] = []
        for transcript in prepared:
            prompts.append((transcript, "full", None, transcript.messages))
            for policy in self.options.policies:
                run, compacted, truncated = await self._replay(transcript, policy)
                runs.append(run)
                recalled += [
                    self._scored(transcript, r.probe, "recalled", policy, r.reply)
                    for r in run.replayed.after or ()
                ]
                prompts.append((transcript, "compacted", policy, compacted))
                prompts.append((transcript, "truncated", policy, truncated))
        jobs = [
            self._ask(transcript, probe, variant, policy, history)
            for transcript, variant, policy, history in prompts
            for probe in transcript.probes
            if self.scorer.can_score(probe)
        ]
        answers = await asyncio.gather(*jobs, *recalled)
        return Results(
            model=self.options.model,
            judge_model=self.scorer.judge_model,
            policies=self.options.policies,
            transcripts=tuple(prepared),
            runs=tuple(runs),
            answers=tuple(answers),
        )

    async def with_probes(self, transcript: Transcript) -> Transcript:
        """A user transcript gets probes: the judge's, if there is a judge, then identifiers."""
        if transcript.probes:
            return transcript
        limit = self.options.user_probes
        probes: list[Probe] = []
        if self.scorer.judge is not None and self.scorer.judge_model is not None:
            probes = await self._judge_probes(transcript, limit=(limit + 1) // 2)
        probes += identifier_probes(transcript.messages, limit=limit - len(probes))
        return replace(transcript, probes=tuple(probes))

    async def _judge_probes(self, transcript: Transcript, *, limit: int) -> list[Probe]:
        assert self.scorer.judge is not None and self.scorer.judge_model is not None
        log = "\n".join(transcript_line(m) for m in transcript.messages)[:JUDGE_PROBE_CHARS]
        text = await self.scorer.judge.complete(
            [
                {"role": "system", "content": JUDGE_PROBES_PROMPT.format(count=limit)},
                {"role": "user", "content": log},
            ],
            model=self.scorer.judge_model,
            max_tokens=JUDGE_PROBE_TOKENS,
        )
        return parse_judge_probes(text, limit=limit)

    async def _replay(
        self, transcript: Transcript, policy: str
    ) -> tuple[PolicyRun, list[dict[str, Any]], list[dict[str, Any]]]:
        model = self.options.model
        then = None
        if self._recalling:
            probes = [p for p in transcript.probes if self.scorer.can_score(p)]
            ask = partial(
                ask_through_proxy,
                transcript=transcript,
                probes=probes,
                model=model,
                max_tokens=self.options.max_answer_tokens,
                suffix=QUESTION_SUFFIX,
            )
            then = Then(live=self.live, ask=ask)
        replayed = await replay(
            self.settings,
            transcript,
            policy=policy,
            model=model,
            authorization=self.options.authorization,
            on_request=lambda: self.progress("replay", 1),
            then=then,
        )
        compacted = replayed.history
        budget = self.counter.count_messages(compacted, model)
        truncated = truncate(transcript.messages, budget=budget, counter=self.counter, model=model)
        run = PolicyRun(
            transcript=transcript.name,
            policy=policy,
            replayed=replayed,
            tokens_full=self.counter.count_messages(transcript.messages, model),
            tokens_compacted=budget,
            tokens_truncated=self.counter.count_messages(truncated, model),
            dollars=self._dollars(transcript, policy, replayed),
        )
        return run, compacted, truncated

    def _dollars(self, transcript: Transcript, policy: str, replayed: Replayed) -> Dollars | None:
        """The replay's prompts and summaries in dollars, and the same turns sent direct."""
        model = self.options.model
        prices = PriceTable(self.settings.pricing)
        price = prices.price(model)
        if not price.priced:
            return None
        own = self.settings.summarizer.for_policy(
            self.settings.policies[policy], request_model=model
        )
        summarizer_price = prices.price(own.model)
        if not summarizer_price.priced:
            summarizer_price = price
        priced = partial(prompts_dollars, counter=self.counter, model=model, price=price)
        tools = transcript.tools
        summaries = quoted_summaries_dollars(
            replayed.summarizer_input_tokens, replayed.summarizer_output_tokens, summarizer_price
        )
        for asked, text in replayed.prefix_summaries:
            # Read from the cache as far as it shares the request it follows.
            followed = [m for m in replayed.sent if m == asked[: len(m)]][-1:]
            summaries += priced([*followed, asked], tools) - priced(followed, tools)
            summaries += self.counter.count_text(text, model) * price.output / PER_MILLION
        return Dollars(
            spent=priced(replayed.sent, tools),
            summarizer=summaries,
            direct=priced(replayed.direct, tools),
        )

    async def _ask(
        self,
        transcript: Transcript,
        probe: Probe,
        variant: str,
        policy: str | None,
        history: list[dict[str, Any]],
    ) -> Answer:
        question = {"role": "user", "content": f"{probe.question} {QUESTION_SUFFIX}"}
        extra: dict[str, Any] = {}
        if transcript.tools:  # the history has tool calls: declare them, but ask for text
            extra = {"tools": transcript.tools, "tool_choice": "none"}
        async with self._slots:
            reply = await self.answerer.complete(
                [*history, question],
                model=self.options.model,
                max_tokens=self.options.max_answer_tokens,
                **extra,
            )
        return await self._scored(transcript, probe, variant, policy, reply)

    async def _scored(
        self, transcript: Transcript, probe: Probe, variant: str, policy: str | None, reply: str
    ) -> Answer:
        async with self._slots:
            score = await self.scorer.score(probe, reply)
        self.progress("questions", 1)
        return Answer(
            transcript=transcript.name,
            probe=probe,
            variant=variant,
            policy=policy,
            reply=reply,
            correct=score.correct,
            method=score.method,
            judge_unparsed=score.judge_unparsed,
        )
