"""What a wrapped agent's session cost and saved, from the proxy's ``/metrics`` read before and
after it: the proxy may serve others too (``wrap --proxy-url``), so the session is the change."""

from __future__ import annotations

from dataclasses import dataclass, fields

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Totals:
    requests: float = 0.0
    applied: float = 0.0
    tokens_before: float = 0.0
    tokens_after: float = 0.0
    summaries: float = 0.0
    dollars_net_saved: float = 0.0
    reachable: bool = True

    def __sub__(self, other: Totals) -> Totals:
        numbers = {
            f.name: getattr(self, f.name) - getattr(other, f.name)
            for f in fields(self)
            if f.name != "reachable"
        }
        return Totals(**numbers, reachable=self.reachable and other.reachable)


# Totals field <- the samples that add up to it: the metric's sample name, and the outcome label
# it must have (None: any).
_SOURCES = {
    "requests": ("proxy_requests_total", None),
    "applied": ("proxy_compactions_total", "applied"),
    "tokens_before": ("proxy_prompt_tokens_before_total", None),
    "tokens_after": ("proxy_prompt_tokens_after_total", None),
    "summaries": ("proxy_summarizer_calls_total", "ok"),
    "dollars_net_saved": ("proxy_dollars_net_saved", None),
}


def read_totals(url: str) -> Totals:
    """The proxy's counters now; all zero and ``reachable=False`` if /metrics does not answer."""
    try:
        response = httpx.get(f"{url}/metrics", timeout=5)
        response.raise_for_status()
    except httpx.HTTPError:
        return Totals(reachable=False)
    sums = dict.fromkeys(_SOURCES, 0.0)
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            for field, (name, outcome) in _SOURCES.items():
                if sample.name == name and outcome in (None, sample.labels.get("outcome")):
                    sums[field] += sample.value
    return Totals(**sums, reachable=True)


def report(agent: str, url: str, before: Totals, after: Totals) -> str:
    """A few lines for the terminal once the agent has exited."""
    if not (before.reachable and after.reachable):
        return f"compaction-proxy: {agent} exited; the proxy's /metrics at {url} did not answer."
    d = after - before
    saved = d.tokens_before - d.tokens_after
    share = f" ({saved / d.tokens_before:.0%})" if d.tokens_before else ""
    return "\n".join(
        [
            f"compaction-proxy: {agent} session through {url}",
            f"  requests: {d.requests:.0f}, compacted: {d.applied:.0f}, "
            f"summaries made: {d.summaries:.0f}",
            f"  prompt tokens: {d.tokens_before:.0f} sent by the agent, "
            f"{d.tokens_after:.0f} to the provider, {saved:.0f} saved{share}",
            f"  dollars saved net of summaries: ${d.dollars_net_saved:.4f} "
            "(0 where the model has no price: see pricing:)",
        ]
    )
