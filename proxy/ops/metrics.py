"""Prometheus metrics, one registry per app (not the process-global one, so several apps can
live in one process, as in tests). With several uvicorn workers each worker has its own.

Compaction does not call them: it emits events (``proxy.compaction.events``) that
``Metrics.subscribe`` counts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from proxy.compaction.events import (
    AheadOfTimeDropped,
    CalibrationSampled,
    CompactionDecided,
    OverflowRetry,
    RequestPriced,
    SummaryFailed,
    SummaryMade,
    SummaryOmitted,
    SummaryPriced,
    SummaryUnused,
    WindowDiscovered,
    WindowLearned,
)
from proxy.compaction.models.windows import ModelRow
from proxy.core.text import well_formed
from proxy.events import Listeners
from proxy.proxying.events import RequestFinished
from proxy.state.conversations import Store

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# The proxy's own time: a pass-through takes well under a millisecond, an inline summary seconds.
ADDED_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1, 5, 30)


class _Callback(Collector):
    def __init__(self, collect: Callable[[], Iterator[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterator[Metric]:
        yield from self._collect()


class WholeCounter(Counter):
    """A counter of things that come whole (tokens): every increment is rounded. Counts are ints
    today, but one scaled by a factor (a count calibrated against the provider's usage) must not
    put fractions like 7764.999992609024 on /metrics."""

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        super().inc(round(amount), exemplar)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._priced: dict[str, tuple[Any, ...]] = {}  # policy -> its _priced_children
        r = self.registry
        self.requests = Counter(
            "proxy_requests",
            "Requests answered, by route and status.",
            ["route", "status"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "proxy_upstream_latency_seconds",
            "Time until the provider's response headers arrived.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.added_latency = Histogram(
            "proxy_added_latency_seconds",
            "Time from a request's arrival until it was sent upstream: the proxy's own work "
            "(reading, planning, an inline summary).",
            ["route"],
            buckets=ADDED_BUCKETS,
            registry=r,
        )
        self.upstream_failures = Counter(
            "proxy_upstream_failures",
            "Provider responses that failed after their headers were relayed (stage "
            "mid_response): the client's response was cut off unfinished and the request is "
            "counted with status 502.",
            ["route", "stage"],
            registry=r,
        )
        self.compactions = Counter(
            "proxy_compactions",
            "Chat completions by compaction outcome (applied, skipped, pending, blocked, failed, "
            "off, answered) and what the prompt holds instead of the client's turns (applied: summary, "
            "stubs, dropped joined by +; none).",
            ["strategy", "outcome", "applied"],
            registry=r,
        )
        self.headroom_short = Counter(
            "proxy_compaction_headroom_short",
            "Compactions that cannot leave room to grow before the next summary starts: the "
            "fixed prompt (system, tools, summary) fills it (X-Compaction-Warning: headroom).",
            ["strategy"],
            registry=r,
        )
        self.tokens_before = WholeCounter(
            "proxy_prompt_tokens_before", "Prompt tokens the client sent.", registry=r
        )
        self.tokens_after = WholeCounter(
            "proxy_prompt_tokens_after", "Prompt tokens the provider received.", registry=r
        )
        self.summarizer_calls = Counter(
            "proxy_summarizer_calls",
            "Summaries made, by outcome and when.",
            ["outcome", "mode"],
            registry=r,
        )
        self.summarizer_latency = Histogram(
            "proxy_summarizer_latency_seconds",
            "Time to make one summary.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.summarizer_tokens = WholeCounter(
            "proxy_summarizer_tokens",
            "Tokens spent by the summarizer (input: transcript sent; output: summary written), "
            "so savings can be shown net of their cost.",
            ["kind"],
            registry=r,
        )
        self.summarizer_omitted_tokens = WholeCounter(
            "proxy_summarizer_omitted_tokens",
            "Tokens of old turns left out of summaries, about: the oldest part over "
            "summarizer.max_summarized_tokens (each such summary says so).",
            registry=r,
        )
        self.overflow_retries = Counter(
            "proxy_overflow_retries",
            "Context-overflow rescues, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.background_dropped = Counter(
            "proxy_background_dropped", "Background summaries dropped (queue full).", registry=r
        )
        self.summaries_unused = Counter(
            "proxy_summaries_unused",
            "Summaries made and never applied: superseded by a newer summary that does not "
            "extend them (ahead mode, docs/policies.md), by policy.",
            ["policy"],
            registry=r,
        )
        self.window_discoveries = Counter(
            "proxy_window_discoveries",
            "Context windows asked of the provider's /models, by outcome (ok, missing: the "
            "listing does not state it, failed).",
            ["outcome"],
            registry=r,
        )
        self.windows_learned = Counter(
            "proxy_windows_learned",
            "Context windows learned from the provider's overflow answers.",
            registry=r,
        )
        self.calibration_samples = Counter(
            "proxy_calibration_samples",
            "Responses whose usage.prompt_tokens was folded into a model's token factor (used), "
            "or not (ignored: no usage, a small prompt, an outlier).",
            ["outcome"],
            registry=r,
        )
        self.dollars = Counter(
            "proxy_dollars",
            "Dollars billed, by policy and kind (spent: the conversations' own requests, priced "
            "from the provider's usage; direct: what the same requests would have cost sent "
            "with the full history, docs/cost.md; summarizer: the summaries).",
            ["policy", "kind"],
            registry=r,
        )
        self.dollars_saved = Gauge(
            "proxy_dollars_saved",
            "Dollars saved against sending direct (direct - spent), by policy, before the "
            "summarizer's cost (below 0: compaction cost more).",
            ["policy"],
            registry=r,
        )
        self.dollars_net_saved = Gauge(
            "proxy_dollars_net_saved",
            "Dollars saved against sending direct, net of the summarizer's cost, by policy.",
            ["policy"],
            registry=r,
        )
        self.billed_tokens = WholeCounter(
            "proxy_billed_prompt_tokens",
            "Prompt tokens as the provider billed them, by policy and kind (cached: read from "
            "its prompt cache; cache_write: written to it; all: every prompt token).",
            ["policy", "kind"],
            registry=r,
        )
        self.unpriced_requests = Counter(
            "proxy_unpriced_requests",
            "Answered requests whose model has no price (counted as $0; see pricing:).",
            ["policy"],
            registry=r,
        )
        self.background_depth = Gauge(
            "proxy_background_queue_depth", "Background summaries queued or running.", registry=r
        )

    def request_finished(self, event: RequestFinished) -> None:
        """Counts one proxied request."""
        self.child(self.requests, event.route, str(event.status)).inc()
        if event.cut_off:
            self.child(self.upstream_failures, event.route, "mid_response").inc()
        if event.upstream_seconds is not None:
            self.child(self.upstream_latency, event.route).observe(event.upstream_seconds)
        if event.added_seconds is not None:
            self.child(self.added_latency, event.route).observe(event.added_seconds)

    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, cached: the lookup is a measurable share of a proxied
        request's CPU (tests/bench/bench_proxy.py). Label values here are few and bounded."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def subscribe(self, listeners: Listeners) -> None:
        """Count what the routes and compaction tell."""
        listeners.subscribe(RequestFinished, self.request_finished)
        listeners.subscribe(CompactionDecided, self._compaction)
        listeners.subscribe(SummaryMade, self._summary_made)
        listeners.subscribe(SummaryFailed, self._summary_failed)
        listeners.subscribe(SummaryOmitted, self._summary_omitted)
        listeners.subscribe(OverflowRetry, self._overflow_retry)
        listeners.subscribe(AheadOfTimeDropped, self._background_dropped)
        listeners.subscribe(WindowDiscovered, self._window_discovered)
        listeners.subscribe(WindowLearned, self._window_learned)
        listeners.subscribe(CalibrationSampled, self._calibration_sampled)
        listeners.subscribe(RequestPriced, self._request_priced)
        listeners.subscribe(SummaryPriced, self._summary_priced)
        listeners.subscribe(SummaryUnused, self._summary_unused)

    def _compaction(self, event: CompactionDecided) -> None:
        self.child(self.compactions, event.strategy, event.outcome, event.applied or "none").inc()
        if event.headroom_short:
            self.child(self.headroom_short, event.strategy).inc()
        if event.tokens_before is not None and event.tokens_after is not None:
            self.tokens_before.inc(event.tokens_before)
            self.tokens_after.inc(event.tokens_after)

    def _summary_made(self, event: SummaryMade) -> None:
        self.summarizer_latency.observe(event.seconds)
        self.summarizer_calls.labels("ok", event.mode).inc()
        self.summarizer_tokens.labels("input").inc(event.input_tokens)
        self.summarizer_tokens.labels("output").inc(event.output_tokens)

    def _summary_failed(self, event: SummaryFailed) -> None:
        self.summarizer_calls.labels(event.reason, event.mode).inc()

    def _summary_omitted(self, event: SummaryOmitted) -> None:
        self.summarizer_omitted_tokens.inc(event.tokens)

    def _overflow_retry(self, event: OverflowRetry) -> None:
        self.overflow_retries.labels(event.outcome).inc()

    def _background_dropped(self, event: AheadOfTimeDropped) -> None:
        self.background_dropped.inc()

    def _window_discovered(self, event: WindowDiscovered) -> None:
        self.window_discoveries.labels(event.outcome).inc()

    def _window_learned(self, event: WindowLearned) -> None:
        self.windows_learned.inc()

    def _calibration_sampled(self, event: CalibrationSampled) -> None:
        self.child(self.calibration_samples, event.outcome).inc()

    def _request_priced(self, event: RequestPriced) -> None:
        policy = event.policy
        children = self._priced.get(policy)
        if children is None:
            children = self._priced[policy] = self._priced_children(policy)
        spent, direct, saved, net_saved, billed, cached, cache_write = children
        # An increment of 0 changes nothing a scrape reads (each series exists from the first
        # event on): skipped, as most answers write nothing to the prompt cache.
        if event.spent:
            spent.inc(event.spent)
        if event.direct:
            direct.inc(event.direct)
        if difference := event.direct - event.spent:
            saved.inc(difference)
            net_saved.inc(difference)
        if event.prompt_tokens:
            billed.inc(event.prompt_tokens)
        if event.cached_tokens:
            cached.inc(event.cached_tokens)
        if event.cache_write_tokens:
            cache_write.inc(event.cache_write_tokens)
        if not event.priced:
            self.child(self.unpriced_requests, policy).inc()

    def _priced_children(self, policy: str) -> tuple[Any, ...]:
        """The series a priced request of ``policy`` adds to, in ``_request_priced``'s order:
        looked up once a policy (policies are the configured few)."""
        return (
            self.child(self.dollars, policy, "spent"),
            self.child(self.dollars, policy, "direct"),
            self.child(self.dollars_saved, policy),
            self.child(self.dollars_net_saved, policy),
            self.child(self.billed_tokens, policy, "all"),
            self.child(self.billed_tokens, policy, "cached"),
            self.child(self.billed_tokens, policy, "cache_write"),
        )

    def _summary_priced(self, event: SummaryPriced) -> None:
        self.child(self.dollars, event.policy, "summarizer").inc(event.dollars)
        self.child(self.dollars_net_saved, event.policy).dec(event.dollars)

    def _summary_unused(self, event: SummaryUnused) -> None:
        self.child(self.summaries_unused, event.policy).inc(event.count)

    def watch(self, collect: Callable[[], Iterator[Metric]]) -> None:
        """Add metrics read at scrape time (store counters and health)."""
        self.registry.register(_Callback(collect))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def model_families(rows: Iterable[ModelRow]) -> Iterator[GaugeMetricFamily]:
    """Per-model gauges: the context window with where it came from, and the token factor."""
    window = GaugeMetricFamily(
        "proxy_model_context_window",
        "Context window of a model (in the provider's tokens), by where it came from: config, "
        "learned, discovered, built-in (unknown windows are absent).",
        labels=["model", "source"],
    )
    factor = GaugeMetricFamily(
        "proxy_model_token_factor",
        "Provider prompt tokens per token the proxy counts, learned from usage.prompt_tokens.",
        labels=["model"],
    )
    for row in rows:
        model = well_formed(row.model)  # a client's name: one lone surrogate broke /metrics
        if row.window is not None:
            window.add_metric([model, row.source], row.window)
        factor.add_metric([model], row.factor)
    yield window
    yield factor


def counter_family(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def gauge_family(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def store_families(store: Store) -> Iterator[Metric]:
    """The store's counters and health, read when /metrics is scraped."""
    c = store.counters
    yield counter_family("proxy_store_errors", "Store calls that failed or timed out.", c.errors)
    yield counter_family(
        "proxy_store_skipped", "Store calls skipped by the circuit breaker.", c.skipped
    )
    yield counter_family("proxy_store_loads", "Conversation state reads.", c.loads)
    yield counter_family("proxy_store_hits", "Reads that found a record.", c.hits)
    yield counter_family("proxy_store_writes", "Checkpoints written.", c.writes)
    yield counter_family(
        "proxy_store_write_conflicts", "Compare-and-set retries.", c.write_conflicts
    )
    yield counter_family(
        "proxy_store_write_too_large",
        "Checkpoints not stored: over store.max_record_bytes alone.",
        c.write_too_large,
    )
    yield counter_family(
        "proxy_store_owner_mismatches", "Records refused for a wrong owner.", c.owner_mismatches
    )
    yield gauge_family(
        "proxy_store_degraded",
        "1 while the store is degraded.",
        float(store.state().state == "degraded"),
    )
