"""One structured line per proxied request: never the Authorization header, never message content.

A proxied route records what became of its request in an ``Exchange`` (``Exchange.begin``) and,
once the request has ended, however it ended, writes it out (``log_exchange``). Requests no
route recorded (health, metrics, admin, a 404) write no line.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import orjson

from proxy.types import Scope

logger = logging.getLogger("proxy.access")


@dataclass
class Exchange:
    """What became of one request, filled in as it happens, so that the access log and the
    metrics tell a request the client cut short as it went. As nginx does, a client
    that leaves once its response has started is logged with that response's status, the bytes
    it was sent and ``client_left``; 499 means it left before any status was sent."""

    status: int = 500  # what the client was sent (500 until something is)
    bytes_in: int = 0  # request body bytes read from the client
    bytes_out: int = 0  # response body bytes sent to the client
    # Until the provider's response headers; when the client left before they came, until it
    # left. None: nothing was sent upstream.
    upstream_ms: float | None = None
    answered: bool = False  # the provider's response headers came
    responded: bool = False  # a response status was sent to the client
    client_left: bool = False  # the client went away after its response started, before its end
    # The provider failed after the response headers went out, and the proxy ended the client's
    # response unfinished on purpose (proxy.server.abort.cut_off).
    cut_off: bool = False
    arrived: float = 0.0  # time.perf_counter() when the route took the request
    # From its arrival until it was sent upstream: the proxy's own work (compaction's reading,
    # planning, an inline summary). None: nothing was sent upstream.
    added_ms: float | None = None

    @classmethod
    def begin(cls) -> Exchange:
        """A new record of a request arriving now."""
        return cls(arrived=time.perf_counter())


def log_exchange(scope: Scope, exchange: Exchange) -> None:
    """Write ``exchange``, the record of the request in ``scope``, now ended, as one JSON line on
    ``proxy.access`` (INFO; ``server.access_log: false`` raises that logger's level and nothing
    is written)."""
    if logger.isEnabledFor(logging.INFO):
        _write(scope, exchange, total_ms=(time.perf_counter() - exchange.arrived) * 1000)


def _write(scope: Scope, exchange: Exchange, *, total_ms: float) -> None:
    upstream_ms = exchange.upstream_ms
    record = {
        "method": scope["method"],
        "path": scope["path"],
        "status": exchange.status,
        "upstream_ms": None if upstream_ms is None else round(upstream_ms, 2),
        "total_ms": round(total_ms, 2),
        "bytes_in": exchange.bytes_in,
        "bytes_out": exchange.bytes_out,
    }
    if exchange.client_left:
        record["client_left"] = True
    # Handed to the handlers as logger.info would, without looking up its caller (the frames
    # walked and the file name normalised on every request): the line never shows it.
    logger.handle(
        logger.makeRecord(logger.name, logging.INFO, __file__, 0, _line(record), (), None, "_write")
    )


def _line(record: dict[str, object]) -> str:
    """The record as compact JSON, as ``json.dumps`` writes it (non-ASCII escaped): orjson
    writes the same characters for ASCII text, numbers, booleans and null, in a tenth of the
    time (a line is written for every request)."""
    method, path = record["method"], record["path"]
    if isinstance(method, str) and isinstance(path, str) and method.isascii() and path.isascii():
        return orjson.dumps(record).decode()
    return json.dumps(record, separators=(",", ":"))
