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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from proxy.compaction.policies import choose_policy
from proxy.compaction.summarizer import summarizer_factory
from proxy.compaction.windows import ModelWindows
from proxy.config.settings import Settings, load_settings
from proxy.core.messages import calls_text, content_text, validate_messages
from proxy.core.plan_view import describe_plan
from proxy.core.planner import Plan, plan
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.core.tokens import TokenCounter, lookup_model
from proxy.core.triggers import compile_conditions
from proxy.errors import ConfigError, InvalidRequest, SummarizerError

DEFAULT_MODEL = "gpt-4o"
PREVIEW_CHARS = 80
_MIN_WIDTH = 120  # a pipe or a test gets a readable table, not rich's 80 columns


@dataclass(frozen=True)
class DryRun:
    """One planned conversation and what it was planned with."""

    body: dict[str, Any]
    model: str
    model_info: ModelInfo | None
    policy_name: str
    policy: PolicySettings
    counter: TokenCounter
    plan: Plan
    window_source: str = "unknown"  # config, built-in (learned and discovered: at run time)


def load_conversation(path: str | Path) -> dict[str, Any]:
    """A chat completion body, or a bare message list turned into one; InvalidRequest if not."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise InvalidRequest(f"{path} is not valid JSON: {exc}") from exc
    if isinstance(data, list):
        return {"messages": data}
    if not isinstance(data, dict) or "messages" not in data:
        raise InvalidRequest(f"{path}: expected a request body with messages, or a message list")
    return data


def dry_run(
    settings: Settings, body: dict[str, Any], *, policy_name: str | None, model: str | None
) -> DryRun:
    """Plan ``body`` with no stored state, as the admin preview does."""
    model = model or body.get("model") or DEFAULT_MODEL
    if policy_name is None:
        policy_name, policy = choose_policy(settings, {}, model=model, tenant="")
    elif policy_name in settings.policies:
        policy = settings.policies[policy_name]
    else:
        known = ", ".join(settings.policies)
        raise InvalidRequest(f"no configured policy named {policy_name!r} (have: {known})")
    messages = validate_messages(body.get("messages"))
    table = settings.model_table()
    counter = TokenCounter(table)
    info = lookup_model(model, table)
    source = (
        ModelWindows(settings.models, settings.upstream).resolve(model).source
    )  # offline: config or built-in
    planned = plan(
        messages,
        policy,
        model=model,
        counter=counter,
        model_info=info,
        prior=None,
        tools=body.get("tools"),
    )
    return DryRun(body, model, info, policy_name, policy, counter, planned, source)


async def summarize(settings: Settings, run: DryRun, *, authorization: str | None) -> DryRun:
    """The plan with the summary it asks for, written by the configured summarizer."""
    wanted = run.plan.summary_request
    if wanted is None:
        return run
    own = settings.summarizer.for_policy(run.policy, request_model=run.model)
    # Each call is bounded by the client's timeout (a timeout is a SummarizerError); a long,
    # chunked summary may take several calls, which a user at a terminal can interrupt.
    async with httpx.AsyncClient(timeout=own.timeout_seconds, trust_env=False) as client:
        credentials = {"authorization": authorization} if authorization else None
        summarizer = summarizer_factory(
            settings.summarizer, settings.upstream, settings.model_table(), client, run.counter
        )(credentials, own)
        text = await summarizer.summarize(
            wanted.messages,
            previous=wanted.previous,
            model=own.model,
            max_tokens=own.max_summary_tokens,
        )
    return replace(run, plan=run.plan.with_summary(text))


# --- rendering -----------------------------------------------------------------------------------


def render(run: DryRun, console: Console, *, settings: Settings, summarized: bool) -> None:
    view = describe_plan(run.plan, include_messages=False)
    console.print(_header(run))
    console.print(_interactions(run, view))
    console.print(_tokens(run))
    console.print(_triggers(run))
    if run.plan.blocked:
        console.print(
            Text(
                "blocked: a trigger fired but nothing can be cut safely (a single message over "
                "the trigger, a summary that would not be smaller than what it replaces, or no "
                "complete tool round before the newest one); the proxy would answer "
                "X-Compaction: blocked"
            )
        )
    request = run.plan.summary_request
    if request is not None:
        touched = [
            i for i in view["interactions"] if request.start <= i["messages"][0] < request.covered
        ]
        count = f"{len(touched)} interactions"
        if touched and touched[-1]["messages"][1] > request.covered:
            count += ", the last one up to a tool-round boundary: its user message is sent again"
        own = settings.summarizer.for_policy(run.policy, request_model=run.model)
        where = own.base_url or settings.upstream.base_url
        console.print(
            Panel(
                Text(
                    f"messages {request.start}..{request.covered - 1} ({count}) "
                    f"would be summarized by {own.model} at {where}. "
                    "Run with --summarize to make the summary; until it exists they are sent "
                    "as they are (mode: ahead makes it in the background)."
                ),
                title="summary needed",
            )
        )
    title = "what would be sent"
    if summarized and run.plan.summary_text is not None:
        console.print(Panel(Text(run.plan.summary_text), title="summary"))
        title += " (with the summary)"
    elif summarized:
        console.print(Text("no summary needed: no trigger is near, or everything is kept"))
    console.print(_sent(run, title))


def _header(run: DryRun) -> Text:
    info = run.model_info
    window = (
        f"window {info.context_window} from the {run.window_source} table, {info.encoding}"
        if info
        else "window unknown: context_fraction is off for this model until the proxy discovers "
        "or learns its window"
    )
    policy = run.policy
    return Text(
        f"model {run.model} ({window})\npolicy {run.policy_name}: strategy {policy.strategy}, "
        f"mode {policy.mode}; planned with no stored state, as a conversation's first request"
    )


def _interactions(run: DryRun, view: dict[str, Any]) -> Table:
    p = run.plan
    table = Table(title="interactions")
    table.add_column("#", justify="right")
    table.add_column("messages")
    table.add_column("roles")
    table.add_column("tokens", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("fate")
    preamble = p.grouping.preamble_len
    if preamble:
        tokens = sum(run.counter.per_message(p.source[:preamble], run.model))
        table.add_row(
            "-",
            _range(0, preamble),
            _roles(p.source[:preamble]),
            str(tokens),
            "",
            "kept (preamble)",
        )
    request = p.summary_request
    for item in view["interactions"]:
        start, end = item["messages"]
        fate = item["fate"]
        if request is not None and request.start <= start < request.covered:
            fate = "to summarize"
            if request.covered < end:  # a cut between the rounds of this interaction
                fate += f" to message {request.covered - 1}, user message kept"
        cleared = sum(start <= i < end for i in p.cleared)
        if cleared:
            fate += f", {cleared} tool result{'s' if cleared > 1 else ''} cleared"
        table.add_row(
            str(item["index"]),
            _range(start, end),
            _roles(p.source[start:end]),
            str(item["tokens"]),
            str(item["rounds"]),
            fate,
        )
    return table


def _tokens(run: DryRun) -> Text:
    p = run.plan
    saved = p.tokens_before - p.tokens_after
    share = f" ({saved / p.tokens_before:.0%})" if p.tokens_before else ""
    window = run.model_info.context_window if run.model_info else None
    of_window = f", {p.tokens_after / window:.1%} of the window" if window else ""
    return Text(
        f"tokens before {p.tokens_before}  after {p.tokens_after}  saved {saved}{share}{of_window}   "
        f"messages {len(p.source)} -> {len(p.messages)}"
    )


def _triggers(run: DryRun) -> Table:
    """Each enabled trigger: threshold, what this conversation measures, fired / near."""
    p, trigger = run.plan, run.policy.trigger
    window = run.model_info.context_window if run.model_info else None
    tokens, interactions, interaction_tokens = _measures(run)
    rows: list[tuple[str, str, str]] = []
    if trigger.input_tokens:
        rows.append(("input_tokens", str(trigger.input_tokens), str(tokens)))
    if trigger.context_fraction:
        limit = f"{trigger.context_fraction:.0%} of {window}" if window else "off: window unknown"
        rows.append(("context_fraction", limit, f"{tokens / window:.1%}" if window else "-"))
    if trigger.interactions:
        rows.append(("interactions", str(trigger.interactions), str(interactions)))
    if trigger.interaction_tokens:
        rows.append(
            ("interaction_tokens", str(trigger.interaction_tokens), str(interaction_tokens))
        )
    if trigger.messages:
        rows.append(("messages", str(trigger.messages), str(len(p.source))))
    if trigger.on_tool_success:
        rows.append(("on_tool_success", ", ".join(trigger.on_tool_success), "last interaction"))
    if trigger.on_tool_error:
        rows.append(("on_tool_error", ", ".join(trigger.on_tool_error), "last interaction"))
    table = Table(title=f"triggers (near = past {run.policy.soft_fraction:.0%} of a threshold)")
    for name in ("trigger", "threshold", "measured", "state"):
        table.add_column(name)
    for name, threshold, measured in rows:
        state = "FIRED" if name in p.fired else "near" if name in p.near else "-"
        if state == "FIRED" and p.blocked:
            state = "FIRED, blocked: nothing to cut"
        table.add_row(name, threshold, measured, state)
    if not rows:
        table.add_row("(none enabled)", "", "", "")
    return table


def _measures(run: DryRun) -> tuple[int, int, int]:
    """Prompt tokens, interactions and their tokens as the triggers count them with no summary:
    after clear_tool_results, interactions filtered by the trigger's conditions."""
    p = run.plan
    grouping = p.grouping
    source_tail = sum(run.counter.per_message(p.source[grouping.preamble_len :], run.model))
    tokens = p.tokens_before - source_tail + sum(p.interaction_tokens)
    conditions = compile_conditions(run.policy.trigger.conditions)
    counted = [
        k
        for k in range(len(grouping))
        if not conditions
        or any(all(c.matches(m) for c in conditions) for m in p.source[slice(*grouping.span(k))])
    ]
    return tokens, len(counted), sum(p.interaction_tokens[k] for k in counted)


def _sent(run: DryRun, title: str) -> Table:
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("tokens", justify="right")
    table.add_column("content", overflow="fold")
    for i, message in enumerate(run.plan.messages):
        table.add_row(
            str(i),
            str(message.get("role")),
            str(run.counter.count_message(message, run.model)),
            Text(_preview(message)),
        )
    return table


def _preview(message: dict[str, Any]) -> str:
    text = content_text(message.get("content"))
    calls = calls_text(message)
    if calls:
        text = f"{text} [calls] {calls}".strip()
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _range(start: int, end: int) -> str:
    return f"{start}" if end - start == 1 else f"{start}..{end - 1}"


def _roles(messages: list[dict[str, Any]]) -> Text:
    """Roles in order, repeats folded: "user, assistant (2 calls), tool x2, assistant"."""
    labels: list[str] = []
    for message in messages:
        role = str(message.get("role"))
        calls = len(message.get("tool_calls") or ())
        labels.append(f"{role} ({calls} call{'s' if calls > 1 else ''})" if calls else role)
    folded: list[str] = []
    count = 0
    for i, label in enumerate(labels):
        count += 1
        if i + 1 == len(labels) or labels[i + 1] != label:
            folded.append(f"{label} x{count}" if count > 1 else label)
            count = 0
    # Tool rounds of an agent run: "[assistant (1 call), tool] x30".
    rounds: list[str] = []
    i = 0
    while i < len(folded):
        pair = folded[i : i + 2]
        repeats = 1
        while len(pair) == 2 and folded[i + 2 * repeats : i + 2 * repeats + 2] == pair:
            repeats += 1
        if repeats > 1:
            rounds.append(f"[{', '.join(pair)}] x{repeats}")
            i += 2 * repeats
        else:
            rounds.append(folded[i])
            i += 1
    return Text(", ".join(rounds))


# --- the command ---------------------------------------------------------------------------------


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
    # keeps --json valid JSON, instead of failing the UTF-8 write (issue 17).
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
