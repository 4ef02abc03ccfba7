"""``compaction-proxy simulate``: what a policy would do to a conversation file, as a table.

The same dry run as the admin preview (``plan_view.describe_plan``), for a file on disk and
with no stored state: the interactions and their fate, the token counts, which triggers fire or
are near, and what would be sent. Nothing is called unless ``--summarize`` asks for the summary,
which is then made by the configured summarizer, exactly as the proxy would ask for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from rich.console import Console

from proxy.config.settings import load_settings
from proxy.core.plan_view import describe_plan
from proxy.errors import ConfigError, InvalidRequest, SummarizerError
from proxy.tools.dry_run import dry_run, load_conversation, summarize
from proxy.tools.dry_run_view import render

_MIN_WIDTH = 120  # a pipe or a test gets a readable table, not rich's 80 columns


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("conversation", help="JSON: a chat completion body, or a message list")
    parser.add_argument("--config", help="YAML config file (default: built-in defaults)")
    parser.add_argument("--policy", help="policy name (default: as the routes choose by model)")
    parser.add_argument("--model", help="model name (default: the body's, else gpt-4o)")
    parser.add_argument(
        "--summarize",
        action="store_true",
        help="call the configured summarizer and show the plan with the summary (key: "
        "summarizer.api_key, upstream.api_key, else $OPENAI_API_KEY, which like a caller's key "
        "goes only to the upstream)",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def command(args: argparse.Namespace) -> int:
    # A lone surrogate ("\\ud800", valid JSON) in the file is shown as that escape, which
    # keeps --json valid JSON, instead of failing the UTF-8 write.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    try:
        settings = load_settings(args.config)
        run = dry_run(
            settings,
            load_conversation(args.conversation),
            policy_name=args.policy,
            model=args.model,
        )
        if args.summarize:
            key = os.environ.get("OPENAI_API_KEY")
            run = asyncio.run(summarize(settings, run, authorization=key and f"Bearer {key}"))
    except (ConfigError, InvalidRequest) as exc:
        print(f"compaction-proxy: {exc}", file=sys.stderr)
        return 2
    except SummarizerError as exc:
        print(f"compaction-proxy: the summary failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        view = {"policy": run.policy_name, "model": run.model, **describe_plan(run.plan)}
        print(json.dumps(view, indent=2, ensure_ascii=False))
        return 0
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, _MIN_WIDTH))
    render(run, console, settings=settings, summarized=args.summarize)
    return 0
