"""Spans of the request path, over opentelemetry-api: the one tracing module every layer may use.

Off unless the operator's ``OTEL_*`` environment asks for traces (``proxy/ops/tracing.py``
builds the SDK and calls ``install``; docs/operations.md, "Traces"). While off, every function
here is one ``is None`` test: ``span()`` hands back a shared do-nothing context manager, nothing
is allocated, no context variable is touched, and the client's ``traceparent`` crosses to the
provider untouched, as any other header. The request path of a plain request tests ``on`` before
it calls in at all.

While on, a client request is one SERVER span (``serve``), named and attributed after the GenAI
semantic conventions (``gen_ai.*``: ``{operation} {model}``), continuing the client's
``traceparent``; the steps beneath it are child spans (``span``): the plan, each summarizer call
(a CLIENT ``gen_ai`` span of its own), each call to a networked store, the provider call
(whose context goes upstream in a new ``traceparent``, ``outgoing``). Attributes carry names, numbers and outcomes,
never message content or keys.

Span names the request path uses (kept here so that one place says what a trace holds):
``compaction.plan``, ``store``, ``chat {model}`` (a summarizer call), the provider call
(``{method}``), and ``RECALL_ROUND`` for each round of the recall tool answered inside a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context, propagate
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

# One recall round (the proxy answering the model's recall tool inside a request): wrap it in
# ``span(RECALL_ROUND, {...})``, with ``recall.*`` attributes of numbers and handles only.
RECALL_ROUND = "compaction.recall"

Attributes = Mapping[str, Any]

_tracer: Tracer | None = None
# Whether a tracer is installed. Read as an attribute (``tracing.on``) where a request would
# otherwise call in only to learn that nothing is traced: a request that is not traced never
# enters this module.
on = False
_OFF: AbstractContextManager[None] = nullcontext()
# The request's SERVER span and its GenAI operation, for what is learned deeper down (model,
# compaction outcome, usage). Set only while tracing is on.
_request: ContextVar[tuple[Span, str] | None] = ContextVar("proxy_request_span", default=None)


def install(tracer: Tracer | None) -> None:
    """Turn tracing on with ``tracer`` (None: off again). Called by the app only."""
    global _tracer, on
    _tracer = tracer
    on = tracer is not None


def span(
    name: str, attributes: Attributes | None = None, *, client: bool = False
) -> AbstractContextManager[Span | None]:
    """A child span of the current one around a ``with`` block (``client``: a call to another
    service); the block gets the span, or None while tracing is off. An exception leaving the
    block marks the span as an error, named by its type only (its message may quote input)."""
    if _tracer is None:
        return _OFF
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    return _Current(_tracer.start_span(name, kind=kind, attributes=_clean(attributes)))


def serve(
    headers: list[tuple[bytes, bytes]], *, operation: str, method: str, route: str
) -> AbstractContextManager[Span | None]:
    """The SERVER span of one client request (its raw ``headers``), continuing the trace they
    carry (``traceparent``). ``operation``: its GenAI operation (``chat``), which names the
    span until the model is known (``request_model``); empty for a request passed through,
    named ``{method} {route}``. ``route``: the route label of metrics and logs."""
    if _tracer is None:
        return _OFF
    carrier = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
    attributes: dict[str, Any] = {"http.request.method": method, "compaction.route": route}
    if operation:
        attributes["gen_ai.operation.name"] = operation
    started = _tracer.start_span(
        operation or f"{method} {route}",
        context=propagate.extract(carrier),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )
    return _Current(started, operation=operation)


class _Current:
    """A started span made the current one for a ``with`` block and ended after it: plainer
    and cheaper than the API's generator-based ``start_as_current_span``. ``operation``: set
    for a request's span, which ``annotate`` and its kin then reach from deeper down."""

    __slots__ = ("_operation", "_request", "_span", "_token")

    def __init__(self, started: Span, *, operation: str | None = None) -> None:
        self._span = started
        self._operation = operation

    def __enter__(self) -> Span:
        self._token = context.attach(set_span_in_context(self._span))
        if self._operation is not None:
            self._request = _request.set((self._span, self._operation))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            self._span.set_status(Status(StatusCode.ERROR, kind.__name__))
        self._span.end()
        if self._operation is not None:
            _request.reset(self._request)
        context.detach(self._token)


def annotate(attributes: Attributes) -> None:
    """Add ``attributes`` (None values left out) to the request's span, if traced."""
    if _tracer is None:
        return
    current, cleaned = _request.get(), _clean(attributes)
    if current is not None and cleaned:
        current[0].set_attributes(cleaned)


def request_model(model: str) -> None:
    """The model the request asks for: named on its span, which takes the GenAI name
    ``{operation} {model}``."""
    if _tracer is None or not model:
        return
    current = _request.get()
    if current is not None:
        request, operation = current
        request.set_attribute("gen_ai.request.model", model)
        if operation:
            request.update_name(f"{operation} {model}")


def failed(target: Span | None, status: int) -> None:
    """An HTTP status on ``target``: ``http.response.status_code``, and an error status when
    the answer is a server error (a 4xx is the client's, not a failure of the span)."""
    if target is None:
        return
    target.set_attribute("http.response.status_code", status)
    if status >= 500:
        target.set_status(Status(StatusCode.ERROR))


def usage(
    target: Span | None = None,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
) -> None:
    """What a provider billed (``gen_ai.usage.*``; input counts cached tokens too) on
    ``target``, or on the request's span."""
    if _tracer is None:
        return
    attributes = {
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.usage.cache_read.input_tokens": cache_read,
        "gen_ai.usage.cache_creation.input_tokens": cache_write,
    }
    if target is not None:
        target.set_attributes(attributes)
    else:
        annotate(attributes)


def inference(operation: str, provider: str, model: str, **request: Any) -> dict[str, Any]:
    """The GenAI attributes of an inference call made by the proxy (``request``: more
    ``gen_ai.request.*`` values, by their last name: ``max_tokens=...``)."""
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        **{f"gen_ai.request.{key}": value for key, value in request.items()},
    }


def provider_call(method: str, url: str) -> dict[str, Any] | None:
    """The HTTP attributes of a call to ``url`` (the host: no path, no query string, which may
    hold a key)."""
    if _tracer is None:
        return None
    parts = urlsplit(url)
    return {
        "http.request.method": method,
        "server.address": parts.hostname,
        "server.port": parts.port or (443 if parts.scheme == "https" else 80),
    }


def outgoing(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` for a call out of the proxy, carrying the current span's context (the
    client's ``traceparent`` replaced by ours); unchanged while tracing is off."""
    if _tracer is None:
        return headers
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return headers
    ours = {name.encode("latin-1") for name in carrier}
    kept = [(k, v) for k, v in headers if k.lower() not in ours]
    return kept + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in carrier.items()]


def carried(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` (lower-cased names) of a call out of the proxy, with the current span's
    context put in while tracing is on."""
    if _tracer is not None:
        propagate.inject(headers)
    return headers


def _clean(attributes: Attributes | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}
