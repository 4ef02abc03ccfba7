"""The report: accuracy per probe category for full / compacted / truncated, their ratios to
the full history, compression and summarizer cost, per policy; as JSON and as a rich table.

Accuracy is the share of probes answered correctly. ``compacted_vs_full`` is compacted accuracy
divided by full-history accuracy (0.92: compaction kept 92% of what the full history could
answer); None when the full history answered nothing in that row.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from proxy.tools.evaluation.probes import CATEGORIES
from proxy.tools.evaluation.runner import Answer, PolicyRun, Results

REPLY_CHARS = 300
OVERALL = "overall"


def _share(answers: list[Answer]) -> float | None:
    return round(sum(a.correct for a in answers) / len(answers), 4) if answers else None


def _ratio(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 4) if part is not None and whole else None


def _accuracy(answers: list[Answer], policy: str) -> dict[str, Any]:
    full = [a for a in answers if a.variant == "full"]
    compacted = [a for a in answers if a.variant == "compacted" and a.policy == policy]
    truncated = [a for a in answers if a.variant == "truncated" and a.policy == policy]
    f, c, t = _share(full), _share(compacted), _share(truncated)
    row = {
        "probes": len(full),
        "full": f,
        "compacted": c,
        "truncated": t,
        "compacted_vs_full": _ratio(c, f),
        "truncated_vs_full": _ratio(t, f),
    }
    recalled = [a for a in answers if a.variant == "recalled" and a.policy == policy]
    if recalled:  # eval --recall: the compacted history, the recall tool offered
        r = _share(recalled)
        row |= {"recalled": r, "recalled_vs_full": _ratio(r, f)}
    return row


def _dollars(runs: list[PolicyRun]) -> dict[str, Any] | None:
    """Prompts and summaries in dollars with prompt caching, and direct (None: unpriced)."""
    priced = [r.dollars for r in runs if r.dollars is not None]
    if not priced or len(priced) < len(runs):
        return None
    total = sum(priced[1:], priced[0])
    return {
        "spent": round(total.spent, 6),
        "summarizer": round(total.summarizer, 6),
        "direct": round(total.direct, 6),
        "vs_direct": total.vs_direct,
    }


def build_report(results: Results) -> dict[str, Any]:
    """The JSON report (the shape is documented in docs/evaluation.md)."""
    answers = list(results.answers)
    policies: dict[str, Any] = {}
    for policy in results.policies:
        runs = [r for r in results.runs if r.policy == policy]
        by_category = {
            category: _accuracy([a for a in answers if a.probe.category == category], policy)
            for category in CATEGORIES
            if any(a.probe.category == category for a in answers)
        }
        full_tokens = sum(r.tokens_full for r in runs)
        compacted_tokens = sum(r.tokens_compacted for r in runs)
        policies[policy] = {
            "accuracy": {**by_category, OVERALL: _accuracy(answers, policy)},
            "tokens": {
                "full": full_tokens,
                "compacted": compacted_tokens,
                "truncated": sum(r.tokens_truncated for r in runs),
            },
            "compression_ratio": _ratio(compacted_tokens, full_tokens),
            "dollars": _dollars(runs),
            "summarizer": {
                "calls": sum(r.replayed.summarizer_calls for r in runs),
                "input_tokens": sum(r.replayed.summarizer_input_tokens for r in runs),
                "output_tokens": sum(r.replayed.summarizer_output_tokens for r in runs),
            },
            "transcripts": [
                {
                    "name": r.transcript,
                    "outcome": r.replayed.outcome,
                    "requests": r.replayed.requests,
                    "tokens_full": r.tokens_full,
                    "tokens_compacted": r.tokens_compacted,
                    "tokens_truncated": r.tokens_truncated,
                    "accuracy": _accuracy(
                        [a for a in answers if a.transcript == r.transcript], policy
                    ),
                }
                for r in runs
            ],
        }
    return {
        "model": results.model,
        "judge_model": results.judge_model,
        "policies": policies,
        "transcripts": [
            {
                "name": t.name,
                "source": t.source,
                "messages": len(t.messages),
                "probes": [p.to_json() for p in t.probes],
            }
            for t in results.transcripts
        ],
        "answers": [
            {
                "transcript": a.transcript,
                "category": a.probe.category,
                "question": a.probe.question,
                "expected": a.probe.answer,
                "variant": a.variant,
                "policy": a.policy,
                "correct": a.correct,
                "method": a.method,
                "judge_unparsed": a.judge_unparsed,
                "reply": a.reply[:REPLY_CHARS],
            }
            for a in answers
        ],
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _money(dollars: dict[str, Any] | None) -> str:
    if dollars is None:
        return "unpriced"
    total = dollars["spent"] + dollars["summarizer"]
    return f"{total:.4f} ({_num(dollars['vs_direct'])})"


def render(report: dict[str, Any], console: Console) -> None:
    """Accuracy per category (policies side by side), then cost and compression per policy."""
    policies: dict[str, Any] = report["policies"]
    judge = f", judge {report['judge_model']}" if report["judge_model"] else ""
    table = Table(title=f"probe accuracy: model {report['model']}{judge}")
    table.add_column("category")
    table.add_column("probes", justify="right")
    table.add_column("full", justify="right")
    for name, data in policies.items():
        table.add_column(f"{name}\ncompacted (c/full)", justify="right")
        if "recalled" in data["accuracy"][OVERALL]:
            table.add_column(f"{name}\nwith recall (r/full)", justify="right")
        table.add_column(f"{name}\ntruncated (t/full)", justify="right")
    first: dict[str, Any] = next(iter(policies.values()), {})
    rows = list(first["accuracy"]) if first else []
    for row in rows:
        cells = [row, str(first["accuracy"][row]["probes"]), _pct(first["accuracy"][row]["full"])]
        for data in policies.values():
            acc = data["accuracy"][row]
            cells.append(f"{_pct(acc['compacted'])} ({_num(acc['compacted_vs_full'])})")
            if "recalled" in acc:
                cells.append(f"{_pct(acc['recalled'])} ({_num(acc['recalled_vs_full'])})")
            cells.append(f"{_pct(acc['truncated'])} ({_num(acc['truncated_vs_full'])})")
        table.add_row(*cells, end_section=len(rows) > 1 and row == rows[-2])
    console.print(table)
    cost = Table(title="compression and cost (all transcripts)")
    for column in ("policy", "tokens full", "tokens compacted", "compression", "summaries",
                   "summarizer in", "summarizer out", "$ (x direct)"):  # fmt: skip
        cost.add_column(column, justify="left" if column == "policy" else "right")
    for name, data in policies.items():
        s = data["summarizer"]
        cost.add_row(
            name,
            str(data["tokens"]["full"]),
            str(data["tokens"]["compacted"]),
            _num(data["compression_ratio"]),
            str(s["calls"]),
            str(s["input_tokens"]),
            str(s["output_tokens"]),
            _money(data["dollars"]),
        )
    console.print(cost)
    for name, data in policies.items():
        untouched = [t["name"] for t in data["transcripts"] if t["outcome"] != "applied"]
        if untouched:
            console.print(
                f"policy {name} did not compact {', '.join(untouched)} (no trigger fired, or all "
                "of it is kept): compacted = full there. Try --context-window, or longer "
                "transcripts."
            )
