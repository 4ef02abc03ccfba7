"""Probe accuracy of ``compaction-proxy eval`` under each shipped config, against a known mock.

Run: .venv/bin/python -m tests.bench.bench_eval_accuracy [--baseline-source DIR]
        [--model gpt-4.1] [--context-window N ...] [--seed 7]
        [--agent-rounds 120] [--chat-turns 60] [--documents 24]

For each shipped config, unedited (config/proxy.yaml, its default policy;
config/examples/coding-agent.yaml; config/examples/long-chat.yaml), it runs ``compaction-proxy
eval`` as a user does (the config file, the built-in transcripts at their default sizes, a real
model name) with the upstream pointed at the mock provider of the eval's tests
(tests/tools/evaluation/provider.py): the summarizer is extractive (it keeps the lines holding a
decision's planted answer; the proxy adds the identifiers it keeps verbatim) and the answering
model is right iff the answer is in its prompt. So a figure moves only when what the proxy sends
moves: when it compacts, what it keeps, how the truncation baseline is cut.

The built-in transcripts (4-13k tokens) are far shorter than a real model's window, so each config
runs twice by default: with the model's own window (as users run it: only what fires below the
window, by price or by count, compacts) and with eval's ``--context-window 8000`` (the window's
own trigger fires too, as docs/evaluation.md advises). ``--context-window`` picks the windows (0:
the model's own).

The shipped configs name real models (the summarizer ``gpt-4o-mini``), so the proxy applies its
own windows and prices to them: the mock answers a call to a config's summarizer model, and a
summary asked on the cached prefix (``summarizer.cached_prefix``), as the summarizer.

``--baseline-source DIR`` (a checkout of another commit, e.g. ``git worktree add /tmp/base
dfccff4``) runs the same in that tree, in a subprocess with that tree's ``proxy`` and
``tests``, and prints both side by side. Nothing is asserted: the figures are a baseline the
changes to the default and the recipes must not fall below (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(HERE.parents[3] / "shared" / "tiktoken"))

import proxy  # noqa: E402
from proxy.cli import main as cli  # noqa: E402
from proxy.compaction.summaries.prefix_summary import INSTRUCTION as PREFIX_INSTRUCTION  # noqa: E402
from proxy.tools.evaluation.synthetic import builtin_transcripts  # noqa: E402
from tests.support.mock_upstream import Reply  # noqa: E402
from tests.support.proxies import running_mock  # noqa: E402
from tests.tools.evaluation.provider import EvalProvider  # noqa: E402

# The tree whose proxy runs: this one, or the baseline's when this file runs there.
ROOT = Path(proxy.__file__).resolve().parents[1]
CONFIGS = {
    "default": "config/proxy.yaml",
    "coding-agent": "config/examples/coding-agent.yaml",
    "long-chat": "config/examples/long-chat.yaml",
}
SUMMARIZER_MODELS = frozenset({"gpt-4o-mini"})  # what the shipped configs name
KEPT_CATEGORY = "decision"  # the extractive summarizer keeps the lines holding these answers
ENV = {"COMPACTION_PROXY_UPSTREAM_URL": "", "COMPACTION_PROXY_UPSTREAM_API_KEY": "sk-bench"}


class ShippedNamesProvider(EvalProvider):
    """The eval tests' mock provider, answering the shipped configs' summarizer model and
    summaries asked on the cached prefix as its extractive summarizer."""

    def chat(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if body["model"] in SUMMARIZER_MODELS:
            return self._summary(messages[-1]["content"])
        last = messages[-1].get("content")
        if isinstance(last, str) and last.startswith(PREFIX_INSTRUCTION):
            return self._summary("\n".join(_text(m) for m in messages[:-1]))
        return super().chat(body)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False) if content else ""


def run_config(config: str, window: int, args: argparse.Namespace) -> dict[str, Any]:
    """``compaction-proxy eval`` with ``config`` (a path under ROOT) as if the model had
    ``window`` tokens (0: its own), its JSON report's figures for the config's default policy."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        argv = ["eval", "--config", str(ROOT / config), "--model", args.model]
        argv += ["--out", str(out), "--seed", str(args.seed), *sizes(args)]
        if window:
            argv += ["--context-window", str(window)]
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            code = cli(argv)
        if code != 0:
            raise SystemExit(f"eval failed on {config} ({code}):\n{quiet.getvalue()[-2000:]}")
        report = json.loads(out.read_text())
    (policy,) = report["policies"].values()
    overall = policy["accuracy"]["overall"]
    return {
        "probes": overall["probes"],
        "full": overall["full"],
        "compacted": overall["compacted"],
        "truncated": overall["truncated"],
        "compacted_vs_full": overall["compacted_vs_full"],
        "truncated_vs_full": overall["truncated_vs_full"],
        "compression": policy["compression_ratio"],
        "summaries": policy["summarizer"]["calls"],
        "outcomes": {t["name"]: t["outcome"] for t in policy["transcripts"]},
    }


def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each shipped config's figures in this tree, per window (keyed "config@window")."""
    transcripts = builtin_transcripts(
        rounds=args.agent_rounds, turns=args.chat_turns, documents=args.documents, seed=args.seed
    )
    probes = [p for t in transcripts for p in t.probes]
    kept = frozenset(p.answer for p in probes if p.category == KEPT_CATEGORY)
    logging.disable(logging.WARNING)  # the proxy's start-up notes, once per config
    figures = {}
    with running_mock() as mock:
        ShippedNamesProvider(mock, answers={p.question: p.answer for p in probes}, keep=kept)
        saved = {name: os.environ.get(name) for name in ENV}
        os.environ.update({**ENV, "COMPACTION_PROXY_UPSTREAM_URL": f"{mock.url}/v1"})
        try:
            for window in args.context_window:
                for name, config in CONFIGS.items():
                    figures[f"{name}@{window}"] = run_config(config, window, args)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return figures


def measure_in(source: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The same figures measured in another checkout, by this file run with that tree's code."""
    argv = [sys.executable, str(HERE), "--json", "--model", args.model, "--seed", str(args.seed)]
    argv += sizes(args)
    argv += ["--context-window", *map(str, args.context_window)]
    env = {**os.environ, "PYTHONPATH": str(source.resolve())}
    done = subprocess.run(
        argv, cwd=source, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the baseline run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def sizes(args: argparse.Namespace) -> list[str]:
    """eval's options for the sizes of its built-in transcripts."""
    return [
        *("--agent-rounds", str(args.agent_rounds)),
        *("--chat-turns", str(args.chat_turns)),
        *("--documents", str(args.documents)),
    ]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def row(figures: dict[str, Any]) -> str:
    outcomes = " ".join(f"{k}={v}" for k, v in figures["outcomes"].items())
    return (
        f"full {_pct(figures['full'])}  compacted {_pct(figures['compacted'])} "
        f"({_ratio(figures['compacted_vs_full'])})  truncated {_pct(figures['truncated'])} "
        f"({_ratio(figures['truncated_vs_full'])})  compression {_ratio(figures['compression'])}"
        f"  summaries {figures['summaries']}  [{outcomes}]"
    )


def render(runs: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    print(f"eval probe accuracy: model {args.model}, seed {args.seed}, mock provider")
    for window in args.context_window:
        print(f"window: {window or 'as the model has (its own)'}")
        for name in CONFIGS:
            print(f"  {name}:")
            for tree, figures in runs.items():
                print(f"    {tree:<10} {row(figures[f'{name}@{window}'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-source", type=Path, help="a checkout of another commit")
    parser.add_argument("--model", default="gpt-4.1", help="the model under test (a real name)")
    parser.add_argument(
        "--context-window",
        type=int,
        nargs="+",
        default=[0, 8000],
        help="eval's --context-window, one run per value (0: the model's own; default: 0 8000)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the built-in transcripts")
    # Larger transcripts than eval's defaults reach the price trigger's floor (pays_from_tokens)
    # under a real model's own window: 400 rounds is about 40k tokens.
    parser.add_argument("--agent-rounds", type=int, default=120, help="coding agent tool rounds")
    parser.add_argument("--chat-turns", type=int, default=60, help="long chat turns")
    parser.add_argument("--documents", type=int, default=24, help="research session searches")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(measure(args)))
        return 0
    runs = {}
    if args.baseline_source is not None:
        runs["baseline"] = measure_in(args.baseline_source, args)
    runs["this tree"] = measure(args)
    render(runs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
