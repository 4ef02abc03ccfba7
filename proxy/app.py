"""The composition root: builds the concrete parts from settings and wires the routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
from prometheus_client.core import Metric
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

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
from proxy.errors import MethodNotAllowed, NotFound, ProxyError
from proxy.events import Listeners
from proxy.ops.admin.routes import admin_app
from proxy.ops.export.exporter import Exporter, export_events, open_sinks
from proxy.ops.hooks import Hooks
from proxy.ops.metrics import Metrics, counter_family, gauge_family, model_families
from proxy.ops.native_metrics import NativeMetrics
from proxy.ops.recall_metrics import RecallMetrics
from proxy.ops.recorder import Recorder
from proxy.ops.tracing import start as start_tracing
from proxy.ops.tracing import stop as stop_tracing
from proxy.ops.tracing import tracer_provider
from proxy.proxying.routes import CompactedRoute, PassThrough, Resources
from proxy.proxying.targets import targets
from proxy.server.abort import quiet_uvicorn
from proxy.server.access_log import AccessLog
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
    metrics = Metrics()
    # What the routes and compaction tell operator features (metrics, hooks, export, recorder).
    listeners = Listeners()
    metrics.subscribe(listeners)
    NativeMetrics(metrics.registry).subscribe(listeners)  # strategy native
    RecallMetrics(metrics.registry).subscribe(listeners)  # the recall tool
    counter = counter or TokenCounter(settings.model_table())
    tokenizer: list[asyncio.Future[bool]] = []  # the start-up load, for /readyz
    tenancy = store.tenancy if store is not None else Tenancy.from_settings(settings.store)
    store = store or open_store(settings.store, tenancy=tenancy)
    summarizer_client = httpx.AsyncClient(
        timeout=settings.summarizer.timeout_seconds, trust_env=False, follow_redirects=False
    )
    background = BackgroundQueue(
        max_queue=settings.summarizer.background_queue,
        concurrency=settings.summarizer.background_concurrency,
    )
    windows = ModelWindows(
        settings.models,
        settings.upstream,
        client=lambda: resources.client,
        listeners=listeners,
    )
    calibration = Calibration(settings.calibration, listeners=listeners)
    # Hooks and summary export (opt-in; docs/operations.md), their metrics on /metrics.
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
    compactor = Compactor(
        CompactionSettings.of(settings),
        store=store,
        counter=counter,
        summarizer_for=summarizer_for
        or summarizer_factory(
            settings.summarizer,
            settings.upstream,
            settings.model_table(),
            summarizer_client,
            counter,
            listeners=listeners,
        ),
        background=background,
        windows=windows,
        calibration=calibration,
        listeners=listeners,
        clock=clock,
        review=hooks,
        tenancy=tenancy,
        prices=PriceTable(settings.pricing),
        # The agents' own compaction (docs/agent-compaction.md).
        agents=AgentWires(
            asks={MESSAGES.name: CLAUDE_CODE, RESPONSES.name: CODEX},
            compact=COMPACT_ITEMS,
            answer_compact=answers_compact(str(settings.upstream.base_url)),
        ),
    )
    recorder = Recorder.from_settings(settings.record, conversation=settings.conversation)
    if recorder is not None:
        recorder.subscribe(listeners)
    resources = Resources(
        server=settings.server,
        upstream=settings.upstream,
        compaction=compactor,
        listeners=listeners,
    )
    metrics.background_depth.set_function(lambda: background.depth)
    metrics.watch(lambda: _store_metrics(store))
    metrics.watch(lambda: model_families(windows.rows(calibration.factors())))
    traces = tracer_provider()  # None unless the OTEL_* environment asks for traces

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        resources.client = upstream or open_upstream(settings.upstream)
        start_tracing(traces)
        quiet_uvicorn()  # one WARNING of ours per cut-off response, not an ERROR of uvicorn's too
        for warning in startup_warnings(settings):
            logger.warning("%s", warning)
        tokenizer.append(await _load_tokenizer(counter, settings))
        await store.start()  # the shared tenant secret, before the first request
        # While the store is degraded, probe it without waiting for traffic (readyz recovers).
        probe = asyncio.create_task(store.watch(settings.store.breaker_cooldown_seconds))
        try:
            yield
        finally:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
            await windows.aclose()
            await background.aclose(settings.server.shutdown_grace_seconds)
            with contextlib.suppress(TimeoutError):  # the books and originals of the last answers
                await asyncio.wait_for(compactor.join(), timeout=5)
            await hooks.aclose(settings.server.shutdown_grace_seconds)
            client, resources.client = resources.client, None
            if client is not None:
                await client.aclose()
            await summarizer_client.aclose()
            await store.aclose()
            await asyncio.to_thread(stop_tracing, traces)  # exports the spans still batched

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def reachable(request: Request) -> Response:
        # Claude Code probes HEAD on its base URL at start-up; a 404 there reads as "down".
        return Response(status_code=200)

    async def readyz(request: Request) -> Response:
        # A store outage is reported but does not make the proxy unready: requests are still
        # served (without compaction), and an outage must not empty the load balancer.
        ready = resources.client is not None
        health = store.state()
        return JSONResponse(
            {
                "status": "ready" if ready else "unready",
                "upstream": "ok" if ready else "closed",
                # Not a readiness condition: without tiktoken's files counts are approximate.
                "tokenizer": _tokenizer_state(tokenizer),
                "store": {
                    "state": health.state,
                    "backend": health.backend,
                    "reason": health.reason,
                },
            },
            status_code=200 if ready else 503,
        )

    async def metrics_endpoint(request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    async def not_served(request: Request, exc: Exception) -> Response:
        """Starlette's own 404 and 405, in OpenAI's error shape like every other answer."""
        assert isinstance(exc, HTTPException)
        where = f"{request.method} {request.url.path}"
        error: ProxyError
        if exc.status_code == 405:
            error = MethodNotAllowed(f"{where}: method not allowed", code="method_not_allowed")
        elif request.url.path.startswith("/v1/") or request.url.path.startswith("/admin/"):
            error = NotFound(f"{where} is not served by this proxy", code="not_found")
        else:  # most likely a client whose base URL lacks /v1
            error = NotFound(
                f"{where} is not served by this proxy: API paths start with /v1, so the "
                "client's base URL must end in /v1 (for example http://localhost:8080/v1)",
                code="not_found",
            )
        return Response(
            error.to_body(),
            status_code=error.status_code,
            headers=exc.headers,
            media_type="application/json",
        )

    openai, anthropic = targets(
        settings.upstream,
        own_headers=frozenset({settings.conversation.own_header.lower().encode()}),
    )
    routes = [
        Route("/", reachable, methods=["HEAD"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/v1/chat/completions", CompactedRoute(resources, CHAT, openai), methods=["POST"]),
        Route("/v1/responses", CompactedRoute(resources, RESPONSES, openai), methods=["POST"]),
        Route("/v1/messages", CompactedRoute(resources, MESSAGES, anthropic), methods=["POST"]),
        Route(
            "/v1/responses/compact",
            CompactedRoute(resources, RESPONSES_COMPACT, openai),
            methods=["POST"],
        ),
        # The rest of Anthropic's Messages API (count_tokens, batches, other methods) goes to the
        # Anthropic upstream unchanged: never to the OpenAI one, with an Anthropic key.
        Route("/v1/messages", PassThrough(resources, anthropic)),
        Route("/v1/messages/{path:path}", PassThrough(resources, anthropic)),
        Route("/v1/{path:path}", PassThrough(resources, openai)),
        Mount(
            "/admin",
            app=admin_app(
                settings.admin,
                store=store,
                compactor=compactor,
                tenancy=tenancy,
                conversation=settings.conversation,
                summarizer=settings.summarizer,
                max_checkpoints=settings.store.max_checkpoints,
                counter=counter,
                dialect=CHAT,
            ),
        ),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_served},
        middleware=[Middleware(AccessLog)],
    )


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


def _store_metrics(store: Store) -> Iterator[Metric]:
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


def create_app_from_env() -> Starlette:
    """uvicorn factory for worker processes: settings from $COMPACTION_PROXY_CONFIG or defaults."""
    return create_app(load_settings())
