"""A dry run shown as a table: the interactions and their fate, the token counts, which triggers
fire or are near, and what would be sent (``compaction-proxy simulate``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from proxy.config.settings import Settings
from proxy.core.messages import calls_text, content_text
from proxy.core.plan_view import describe_plan
from proxy.core.triggers import compile_conditions
from proxy.tools.dry_run import DryRun
from proxy.types import ChatMessage

PREVIEW_CHARS = 80


def render(run: DryRun, console: Console, *, settings: Settings, summarized: bool) -> None:
    """Print the dry run's tables (with the summary, when ``summarized``) on ``console``."""
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
        rows.append(("on_tool_success", ", ".join(trigger.on_tool_success), "new tool results"))
    if trigger.on_tool_error:
        rows.append(("on_tool_error", ", ".join(trigger.on_tool_error), "new tool results"))
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


def _preview(message: ChatMessage) -> str:
    text = content_text(message.get("content"))
    calls = calls_text(message)
    if calls:
        text = f"{text} [calls] {calls}".strip()
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _range(start: int, end: int) -> str:
    return f"{start}" if end - start == 1 else f"{start}..{end - 1}"


def _roles(messages: list[ChatMessage]) -> Text:
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
