"""OpenTelemetry traces, opt-in with the standard ``OTEL_*`` environment (docs/operations.md,
"Traces"): the SDK's tracer provider and its OTLP/HTTP exporter, built only when asked for.

The spans themselves are made on the request path through ``proxy.tracing`` (a leaf over
opentelemetry-api); this module only decides whether they are recorded and where they go. The
SDK reads the rest of the environment itself: ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT``,
``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION``, ``OTEL_TRACES_SAMPLER(_ARG)``,
``OTEL_BSP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_PROPAGATORS``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib import metadata

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)

from proxy import tracing

logger = logging.getLogger("proxy.tracing")

SERVICE = "compaction-proxy"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def wanted(environ: Mapping[str, str]) -> str | None:
    """The span exporter the environment asks for (``otlp``, ``console``), or None: traces
    off. On when ``OTEL_TRACES_EXPORTER`` names one, or when an OTLP endpoint is set and
    ``OTEL_TRACES_EXPORTER`` is not ``none``; ``OTEL_SDK_DISABLED=true`` turns it off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named in ("otlp", "console"):
        return named
    if named == "" and any(environ.get(name, "").strip() for name in _ENDPOINTS):
        return "otlp"
    if named not in ("", "none"):
        logger.warning("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console): no traces", named)
    return None


def tracer_provider(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """The SDK's provider exporting in batches to what the environment names, or None."""
    environ = os.environ if environ is None else environ
    exporter = wanted(environ)
    if exporter is None:
        return None
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if exporter == "otlp" and protocol not in ("", "http/protobuf"):
        logger.warning("OTLP protocol %s is not supported: exporting over http/protobuf", protocol)
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: SERVICE}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    # Imported only when used: the exporter pulls in protobuf and requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def start(provider: TracerProvider | None) -> None:
    """Spans recorded from now on through ``provider`` (None: nothing to do)."""
    if provider is None:
        return
    tracing.install(provider.get_tracer("proxy", _version()))
    logger.info("traces on: OpenTelemetry spans exported (OTEL_* environment)")


def stop(provider: TracerProvider | None) -> None:
    """Spans off again; the ones still batched are exported (bounded by the SDK's timeouts)."""
    if provider is None:
        return
    tracing.install(None)
    provider.shutdown()


def _version() -> str | None:
    try:
        return metadata.version(SERVICE)
    except metadata.PackageNotFoundError:
        return None
