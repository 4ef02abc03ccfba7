"""``compaction-proxy eval``: the command line around the runner.

    compaction-proxy eval --config config/proxy.yaml --policy coding --model gpt-4o-mini \\
        [--transcripts my_logs/*.jsonl] [--judge-model gpt-4o] [--out report.json]

The model under test and the judge are called at ``upstream.base_url`` with ``upstream.api_key``,
else $OPENAI_API_KEY; the summarizer as the proxy calls it (``summarizer.*``). It costs money: see
docs/evaluation.md for how many calls a run makes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from proxy.errors import InvalidRequest, ProxyError
from proxy.tools.evaluation.endpoint import ChatEndpoint
from proxy.tools.evaluation.proxy_parts import ConfigError, Settings, choose_policy, load_settings
from proxy.tools.evaluation.recalled import LiveUpstream
from proxy.tools.evaluation.replay import eval_settings
from proxy.tools.evaluation.report import build_report, render
from proxy.tools.evaluation.runner import Results, Runner, RunOptions
from proxy.tools.evaluation.scoring import Scorer
from proxy.tools.evaluation.synthetic import BUILTIN, builtin_transcripts
from proxy.tools.evaluation.transcripts import Transcript, expand_paths, read_jsonl

_MIN_WIDTH = 120
_TIMEOUT_SECONDS = 600  # one answer from a slow model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    parser.add_argument(
        "--policy",
        action="append",
        help="policy to evaluate; repeat for several side by side (default: the one the "
        "routes choose for --model)",
    )
    parser.add_argument("--model", required=True, help="the model under test")
    parser.add_argument(
        "--transcripts", nargs="+", metavar="JSONL", help="your own transcripts (paths or globs)"
    )
    parser.add_argument(
        "--builtin",
        nargs="*",
        choices=BUILTIN,
        help="built-in transcripts to use (default: all, or none when --transcripts is given)",
    )
    parser.add_argument("--judge-model", help="scores probes without a known answer")
    parser.add_argument("--out", help="write the JSON report to this file")
    parser.add_argument(
        "--context-window",
        type=int,
        help="evaluate as if the model had this window (tokens); context_fraction triggers "
        "then fire on shorter transcripts",
    )
    parser.add_argument("--agent-rounds", type=int, default=120, help="coding agent tool rounds")
    parser.add_argument("--chat-turns", type=int, default=60, help="long chat turns")
    parser.add_argument("--documents", type=int, default=24, help="research session searches")
    parser.add_argument("--seed", type=int, default=7, help="seed of the built-in transcripts")
    parser.add_argument(
        "--probes", type=int, default=10, help="probes made per user transcript (default 10)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="model calls at once")
    parser.add_argument("--max-answer-tokens", type=int, default=256)
    parser.add_argument(
        "--recall",
        action="store_true",
        help="also ask each probe through the proxy with the recall tool offered (docs/recall.md)",
    )


def choose_transcripts(args: argparse.Namespace) -> list[Transcript]:
    transcripts: list[Transcript] = []
    for path in expand_paths(args.transcripts or []):
        transcripts += read_jsonl(path)
    wanted = args.builtin if args.builtin is not None else ([] if transcripts else list(BUILTIN))
    if wanted:
        built = builtin_transcripts(
            rounds=args.agent_rounds,
            turns=args.chat_turns,
            documents=args.documents,
            seed=args.seed,
        )
        transcripts = [t for t in built if t.name in wanted] + transcripts
    if not transcripts:
        raise InvalidRequest("no transcripts to evaluate")
    return transcripts


def _authorization(settings: Settings) -> str | None:
    key = settings.upstream.api_key
    value = key.get_secret_value() if key is not None else os.environ.get("OPENAI_API_KEY")
    return f"Bearer {value}" if value else None


async def evaluate(
    settings: Settings,
    args: argparse.Namespace,
    transcripts: list[Transcript],
    progress: Progress,
) -> Results:
    authorization = _authorization(settings)
    timeout = httpx.Timeout(_TIMEOUT_SECONDS, connect=settings.upstream.timeouts.connect)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        base_url = settings.upstream.base_url
        answerer = ChatEndpoint(client, base_url=base_url, authorization=authorization)
        judge = (
            ChatEndpoint(client, base_url=base_url, authorization=authorization)
            if args.judge_model
            else None
        )
        options = RunOptions(
            model=args.model,
            policies=tuple(
                args.policy or [choose_policy(settings, {}, model=args.model, tenant="")[0]]
            ),
            authorization=authorization,
            concurrency=args.concurrency,
            max_answer_tokens=args.max_answer_tokens,
            user_probes=args.probes,
            recall=args.recall,
        )
        runner = Runner(
            settings,
            options,
            answerer=answerer,
            scorer=Scorer(judge, judge_model=args.judge_model),
            progress=lambda task, n: progress.advance(tasks[task], n),
            live=LiveUpstream(client, base_url=base_url, authorization=authorization)
            if args.recall
            else None,
        )
        # A user transcript's probes are written first (by the judge, or from its identifiers).
        prepared = [await runner.with_probes(t) for t in transcripts]
        tasks = {
            "replay": progress.add_task("replaying", total=runner.replay_requests(prepared)),
            "questions": progress.add_task("asking", total=runner.questions(prepared)),
        }
        return await runner.run(prepared)


def command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        unknown = [p for p in args.policy or [] if p not in settings.policies]
        if unknown:
            known = ", ".join(settings.policies)
            raise InvalidRequest(f"no configured policy named {unknown[0]!r} (have: {known})")
        settings = eval_settings(settings, model=args.model, context_window=args.context_window)
        transcripts = choose_transcripts(args)
        err = Console(stderr=True, highlight=False)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())  # fmt: skip
        with Progress(*columns, console=err) as progress:
            results = asyncio.run(evaluate(settings, args, transcripts, progress))
    except (ConfigError, InvalidRequest) as exc:
        print(f"compaction-proxy: {exc}", file=sys.stderr)
        return 2
    except ProxyError as exc:  # EvaluationError, or the proxy refusing a replayed request
        print(f"compaction-proxy: the evaluation failed: {exc}", file=sys.stderr)
        return 1
    report = build_report(results)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, _MIN_WIDTH))
    render(report, console)
    return 0
