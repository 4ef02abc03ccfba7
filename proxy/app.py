"""The composition root: builds the concrete parts from settings and wires the routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from proxy.compaction.agents.own_compaction import AgentWires, answers_compact
from proxy.compaction.compactor import Compactor
from proxy.compaction.models.calibration import Calibration
from proxy.compaction.models.windows import ModelWindows, startup_warnings
from proxy.compaction.settings import CompactionSettings
from proxy.compaction.summaries.background import BackgroundQueue
from proxy.compaction.summaries.summarizer import SummarizerFactory, summarizer_factory
from proxy.config.settings import Settings, load_settings
from proxy.core.tokens import TokenCounter
from proxy.dialects.anthropic_messages import MESSAGES
from proxy.dialects.chat_completions import CHAT
from proxy.dialects.claude_code_compact import CLAUDE_CODE
from proxy.dialects.codex_compact import CODEX
from proxy.dialects.responses import RESPONSES
from proxy.dialects.responses_compact import COMPACT_ITEMS, RESPONSES_COMPACT
from proxy.economics.prices import PriceTable
from proxy.events import Listeners
from proxy.ops.admin.routes import admin_app
from proxy.ops.export.exporter import Exporter, export_events, open_sinks
from proxy.ops.hooks import Hooks
from proxy.ops.metrics import Metrics, model_families, store_families
from proxy.ops.native_metrics import NativeMetrics
from proxy.ops.recall_metrics import RecallMetrics
from proxy.ops.recorder import Recorder
from proxy.ops.tracing import start as start_tracing
from proxy.ops.tracing import stop as stop_tracing
from proxy.ops.tracing import tracer_provider
from proxy.proxying.routes import CompactedFirst, CompactedRoute, PassThrough, Resources
from proxy.proxying.targets import targets
from proxy.server.abort import quiet_uvicorn
from proxy.server.not_served import not_served
from proxy.state.conversations import Store
from proxy.state.opening import open_store
from proxy.state.tenancy import Tenancy
from proxy.upstream import UpstreamClient, open_upstream

logger = logging.getLogger("proxy")

_TOKENIZER_LOAD_SECONDS = 30


def create_app(
    settings: Settings,
    *,
    upstream: UpstreamClient | None = None,
    store: Store | None = None,
    summarizer_for: SummarizerFactory | None = None,
    counter: TokenCounter | None = None,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The proxy as an ASGI app. The keyword arguments replace a real part (tests); by default
    each is built from ``settings``, per process. ``clock``: what compaction reads as the time
    (seconds) to know whether a conversation's prompt cache is still warm (the cost bench's
    simulated clock)."""
    # What the routes and compaction tell operator features (metrics, hooks, export, recorder).
    listeners = Listeners()
    metrics = _metrics(listeners)
    counter = counter or TokenCounter(settings.model_table())
    tenancy = store.tenancy if store is not None else Tenancy.from_settings(settings.store)
    store = store or open_store(settings.store, tenancy=tenancy)
    hooks = _hooks(settings, metrics, counter, listeners)
    _record(settings, listeners)
    proxy = _Proxy(settings, listeners, metrics, store, counter, hooks, upstream)
    compactor = _compactor(
        settings,
        proxy,
        tenancy=tenancy,
        listeners=listeners,
        summarizer_for=summarizer_for,
        clock=clock,
    )
    proxy.serve(compactor)
    routes = _routes(settings, proxy, tenancy)
    app = Starlette(
        routes=routes,
        lifespan=proxy.lifespan,
        exception_handlers={HTTPException: not_served},
    )
    # The compacted routes' requests skip the framework's layers (proxy.proxying.routes).
    compacted = {
        (method, route.path): route.app
        for route in routes
        if isinstance(route, Route) and isinstance(route.app, CompactedRoute)
        for method in route.methods or ()
    }
    app.middleware_stack = CompactedFirst(app.build_middleware_stack(), compacted)
    return app


def _metrics(listeners: Listeners) -> Metrics:
    """The Prometheus metrics, hearing every event they count."""
    metrics = Metrics()
    metrics.subscribe(listeners)
    NativeMetrics(metrics.registry).subscribe(listeners)  # strategy native
    RecallMetrics(metrics.registry).subscribe(listeners)  # the recall tool
    return metrics


def _hooks(
    settings: Settings, metrics: Metrics, counter: TokenCounter, listeners: Listeners
) -> Hooks:
    """Hooks and summary export (opt-in; docs/operations.md), their metrics on /metrics."""
    hooks = Hooks.build(
        settings.hooks,
        exporter=Exporter(
            open_sinks(settings.export),
            queue=settings.export.queue,
            events=export_events(metrics.registry),
        ),
        counter=counter,
        registry=metrics.registry,
    )
    hooks.subscribe(listeners)
    return hooks


def _record(settings: Settings, listeners: Listeners) -> None:
    """The recorder of transcripts, when ``record:`` asks for one."""
    recorder = Recorder.from_settings(settings.record, conversation=settings.conversation)
    if recorder is not None:
        recorder.subscribe(listeners)


def _compactor(
    settings: Settings,
    proxy: _Proxy,
    *,
    tenancy: Tenancy,
    listeners: Listeners,
    summarizer_for: SummarizerFactory | None,
    clock: Callable[[], float],
) -> Compactor:
    """Compaction, with the proxy's summarizer, review hooks, prices and agents' wires."""
    return Compactor(
        CompactionSettings.of(settings),
        store=proxy.store,
        counter=proxy.counter,
        summarizer_for=summarizer_for
        or summarizer_factory(
            settings.summarizer,
            settings.upstream,
            settings.model_table(),
            proxy.summarizer_client,
            proxy.counter,
            listeners=listeners,
        ),
        background=proxy.background,
        windows=proxy.windows,
        calibration=proxy.calibration,
        listeners=listeners,
        clock=clock,
        review=proxy.hooks.review,
        tenancy=tenancy,
        prices=PriceTable(settings.pricing),
        # The agents' own compaction (docs/agent-compaction.md).
        agents=AgentWires(
            asks={MESSAGES.name: CLAUDE_CODE, RESPONSES.name: CODEX},
            compact=COMPACT_ITEMS,
            answer_compact=answers_compact(str(settings.upstream.base_url)),
        ),
    )


def _routes(settings: Settings, proxy: _Proxy, tenancy: Tenancy) -> list[BaseRoute]:
    """The proxy's own endpoints, the compacted routes, the pass-through and the admin API."""
    resources = proxy.resources
    openai, anthropic = targets(
        settings.upstream,
        own_headers=frozenset({settings.conversation.own_header.lower().encode()}),
    )
    # Starlette tries the routes in order, a regular expression each: the proxied ones come
    # first, the probes' paths (none under /v1) after them.
    return [
        Route("/v1/chat/completions", CompactedRoute(resources, CHAT, openai), methods=["POST"]),
        Route("/v1/responses", CompactedRoute(resources, RESPONSES, openai), methods=["POST"]),
        Route("/v1/messages", CompactedRoute(resources, MESSAGES, anthropic), methods=["POST"]),
        Route(
            "/v1/responses/compact",
            CompactedRoute(resources, RESPONSES_COMPACT, openai),
            methods=["POST"],
        ),
        Route("/", _reachable, methods=["HEAD"]),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", proxy.readyz, methods=["GET"]),
        Route("/metrics", proxy.metrics_endpoint, methods=["GET"]),
        # The rest of Anthropic's Messages API (count_tokens, batches, other methods) goes to the
        # Anthropic upstream unchanged: never to the OpenAI one, with an Anthropic key.
        Route("/v1/messages", PassThrough(resources, anthropic)),
        Route("/v1/messages/{path:path}", PassThrough(resources, anthropic)),
        Route("/v1/{path:path}", PassThrough(resources, openai)),
        Mount(
            "/admin",
            app=admin_app(
                settings.admin,
                store=proxy.store,
                compactor=proxy.compactor,
                tenancy=tenancy,
                conversation=settings.conversation,
                summarizer=settings.summarizer,
                max_checkpoints=settings.store.max_checkpoints,
                counter=proxy.counter,
                dialect=CHAT,
            ),
        ),
    ]


class _Proxy:
    """What lives as long as the process serves: the parts the lifespan opens and closes, and
    the endpoints that report on them (/readyz, /metrics)."""

    resources: Resources  # once compaction is built (``serve``)
    compactor: Compactor

    def __init__(
        self,
        settings: Settings,
        listeners: Listeners,
        metrics: Metrics,
        store: Store,
        counter: TokenCounter,
        hooks: Hooks,
        upstream: UpstreamClient | None,
    ) -> None:
        self.settings = settings
        self.listeners = listeners
        self.metrics = metrics
        self.store = store
        self.counter = counter
        self.hooks = hooks
        self._upstream = upstream  # a test's client, else opened in the lifespan
        self.summarizer_client = httpx.AsyncClient(
            timeout=settings.summarizer.timeout_seconds, trust_env=False, follow_redirects=False
        )
        self.background = BackgroundQueue(
            max_queue=settings.summarizer.background_queue,
            concurrency=settings.summarizer.background_concurrency,
        )
        self.windows = ModelWindows(
            settings.models, settings.upstream, client=self.client, listeners=listeners
        )
        self.calibration = Calibration(settings.calibration, listeners=listeners)
        self.traces = tracer_provider()  # None unless the OTEL_* environment asks for traces
        self.tokenizer: list[asyncio.Future[bool]] = []  # the start-up load, for /readyz
        metrics.background_depth.set_function(lambda: self.background.depth)
        metrics.watch(lambda: store_families(store))
        metrics.watch(lambda: model_families(self.windows.rows(self.calibration.factors())))

    def serve(self, compactor: Compactor) -> None:
        """What the routes share, once compaction is built."""
        self.compactor = compactor
        settings = self.settings
        self.resources = Resources(settings.server, settings.upstream, compactor, self.listeners)

    def client(self) -> UpstreamClient | None:
        """The upstream client while serving (window discovery asks it)."""
        return self.resources.client

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        settings, store = self.settings, self.store
        self.resources.client = self._upstream or open_upstream(settings.upstream)
        start_tracing(self.traces)
        quiet_uvicorn()  # one WARNING of ours per cut-off response, not an ERROR of uvicorn's too
        for warning in startup_warnings(settings):
            logger.warning("%s", warning)
        self.tokenizer.append(await _load_tokenizer(self.counter, settings))
        await store.start()  # the shared tenant secret, before the first request
        # While the store is degraded, probe it without waiting for traffic (readyz recovers).
        probe = asyncio.create_task(store.watch(settings.store.breaker_cooldown_seconds))
        try:
            yield
        finally:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
            await self._close()

    async def _close(self) -> None:
        grace = self.settings.server.shutdown_grace_seconds
        await self.windows.aclose()
        await self.background.aclose(grace)
        with contextlib.suppress(TimeoutError):  # the books and originals of the last answers
            await asyncio.wait_for(self.compactor.join(), timeout=5)
        await self.hooks.aclose(grace)
        client, self.resources.client = self.resources.client, None
        if client is not None:
            await client.aclose()
        await self.summarizer_client.aclose()
        await self.store.aclose()
        await asyncio.to_thread(stop_tracing, self.traces)  # exports the spans still batched

    async def readyz(self, request: Request) -> Response:
        # A store outage is reported but does not make the proxy unready: requests are still
        # served (without compaction), and an outage must not empty the load balancer.
        ready = self.resources.client is not None
        health = self.store.state()
        return JSONResponse(
            {
                "status": "ready" if ready else "unready",
                "upstream": "ok" if ready else "closed",
                # Not a readiness condition: without tiktoken's files counts are approximate.
                "tokenizer": _tokenizer_state(self.tokenizer),
                "store": {
                    "state": health.state,
                    "backend": health.backend,
                    "reason": health.reason,
                },
            },
            status_code=200 if ready else 503,
        )

    async def metrics_endpoint(self, request: Request) -> Response:
        body, content_type = self.metrics.render()
        return Response(body, media_type=content_type)


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _reachable(request: Request) -> Response:
    # Claude Code probes HEAD on its base URL at start-up; a 404 there reads as "down".
    return Response(status_code=200)


async def _load_tokenizer(counter: TokenCounter, settings: Settings) -> asyncio.Future[bool]:
    """Load tiktoken's encodings in a thread before serving, so the first request never pays
    for it; bounded, since a download with no network may hang: then serving starts anyway."""
    loading = asyncio.ensure_future(asyncio.to_thread(counter.preload, [settings.summarizer.model]))
    done, _ = await asyncio.wait({loading}, timeout=_TOKENIZER_LOAD_SECONDS)
    if not done:
        logger.warning(
            "tiktoken encodings still loading after %ss; serving meanwhile",
            _TOKENIZER_LOAD_SECONDS,
        )
    return loading


def _tokenizer_state(loading: list[asyncio.Future[bool]]) -> str:
    if not loading or not loading[0].done():
        return "loading"
    return "exact" if loading[0].result() else "approximate"


def create_app_from_env() -> Starlette:
    """uvicorn factory for worker processes: settings from $COMPACTION_PROXY_CONFIG or defaults."""
    return create_app(load_settings())
