"""Context windows for any model: where each model's window comes from, in this order.

1. ``config``: the user's ``models:`` table, first matching glob.
2. ``learned``: the provider said so in a context-overflow answer ("maximum context length is N
   tokens"); remembered for the life of the process. A learned window also caps a configured one
   the provider has just proved too large.
3. ``discovered``: the provider's ``/models`` listing (vLLM ``max_model_len``, OpenRouter
   ``context_length``, llama.cpp ``meta`` and ``/props``, LiteLLM ``max_input_tokens``), fetched
   in the background the first time a request names the model, cached with a TTL.
4. ``built-in``: the table of model families (proxy/config/families.py).
5. ``unknown``: ``context_fraction`` and ``keep.fraction`` cannot apply until one of the above
   says more.

Nothing here slows a request: a lookup reads memory only; discovery runs as a background task
(at most one per model, a few at a time, with a timeout) whose result serves later requests.
Model names come from clients, so every table here is bounded, and a dead ``/models`` is asked
again only after a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from proxy.compaction.events import WindowDiscovered, WindowLearned
from proxy.compaction.models.window_sources import (
    entry_window,
    find_entry,
    needs_props,
    positive,
    window_from_error,
)
from proxy.config.families import FAMILIES, Family
from proxy.config.settings import Settings, UpstreamSettings
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.events import Listeners
from proxy.state.tenancy import Credentials
from proxy.types import RawHeaders
from proxy.upstream.base import UpstreamClient
from proxy.upstream.content_coding import Decoder
from proxy.upstream.overflow_answers import is_overflow_error

logger = logging.getLogger("proxy.windows")

DEFAULT_ENCODING = "o200k_base"
MAX_MODELS = 1024  # models remembered (discovered, learned, warned); the least recent go
MAX_LABELLED = 64  # models shown by name in /metrics; later ones are "other"
DISCOVERY_TIMEOUT_SECONDS = 10.0
DISCOVERED_TTL_SECONDS = 3600.0  # then asked again, the old window serving meanwhile
RETRY_AFTER_SECONDS = 300.0  # a failed or silent /models is not asked again before this
LISTING_REUSE_SECONDS = 60.0  # one listing answers every model named meanwhile
MAX_DISCOVERIES_IN_FLIGHT = 4
MAX_LISTING_BYTES = 8 << 20  # OpenRouter's listing of every model is a few MB


@dataclass(frozen=True, slots=True)
class Window:
    """A model's window (None: unknown), the encoding to count it with, and where it came from."""

    context_window: int | None
    encoding: str
    source: str


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One model as /metrics shows it."""

    model: str
    window: int | None
    source: str
    factor: float


def relies_on_window(policy: PolicySettings) -> bool:
    """The policy's only trigger is context_fraction: without a window it never compacts."""
    t = policy.trigger
    others = (
        t.input_tokens,
        t.interactions,
        t.interaction_tokens,
        t.messages,
        t.on_tool_success,
        t.on_tool_error,
    )
    return (
        policy.strategy in ("summarize", "neuralyze") and t.context_fraction > 0 and not any(others)
    )


def startup_warnings(settings: Settings) -> list[str]:
    """One line per policy that depends on windows only, saying how unknown ones are filled."""
    how = (
        "discovered from the provider's /models or learned from its first overflow answer"
        if settings.upstream.discover_windows
        else "learned from the provider's first overflow answer (upstream.discover_windows is off)"
    )
    return [
        f"policy {name!r} {_compacts_on(policy, settings)}: a model without a window in the "
        f"models table is not compacted by its window until the window is {how}"
        for name, policy in settings.policies.items()
        if relies_on_window(policy)
    ]


def _compacts_on(policy: PolicySettings, settings: Settings) -> str:
    if policy.trigger.pays and policy.strategy == "summarize":
        if settings.pricing.reference is not None:
            return (
                "compacts on context_fraction, and by price (trigger.pays; a model without a "
                "price is decided at pricing.reference)"
            )
        return (
            "compacts on context_fraction, and by price (trigger.pays) only for a model with a "
            "price (built in or under pricing; pricing.reference is null)"
        )
    return "compacts only on context_fraction"


def table_lines(settings: Settings) -> list[str]:
    """The effective model table for ``check-config``: glob, window, encoding, source."""
    rows = [(g, str(m.context_window), m.encoding, "config") for g, m in settings.models.items()]
    rows += [
        (
            f.glob,
            str(f.context_window),
            f.encoding,
            "built-in" + (", /models first" if f.discover else ""),
        )
        for f in FAMILIES
        if f.glob not in settings.models
    ]
    width = max(len(r[0]) for r in rows)
    return [f"{g:<{width}}  {w:>9}  {e:<11}  {s}" for g, w, e, s in rows]


def _match(model: str, table: Mapping[str, Any]) -> tuple[str, Any] | None:
    for pattern, value in table.items():
        if fnmatchcase(model, pattern):
            return pattern, value
    return None


@dataclass
class _Discovered:
    window: int | None
    retry_at: float  # monotonic time after which /models may be asked again


_V = TypeVar("_V")


class _Bounded(OrderedDict[str, _V]):
    """A dict that forgets its least recently set entries beyond ``MAX_MODELS``."""

    def put(self, key: str, value: _V) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > MAX_MODELS:
            self.popitem(last=False)


class ModelWindows:
    """Resolves, discovers and learns context windows; one per app."""

    def __init__(
        self,
        models: Mapping[str, ModelInfo],
        upstream: UpstreamSettings,
        *,
        client: Callable[[], UpstreamClient | None] = lambda: None,
        listeners: Listeners | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._upstream = upstream
        self._config = dict(models)
        self._families = {f.glob: f for f in FAMILIES}
        self._client = client
        self._listeners = listeners or Listeners()
        self._clock = clock
        self._static: dict[str, tuple[Window, bool]] = {}  # model -> (table window, discover?)
        self._learned: _Bounded[int] = _Bounded()
        self._discovered: _Bounded[_Discovered] = _Bounded()
        self._warned: _Bounded[bool] = _Bounded()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._listing: tuple[float, object] | None = None  # (fetched at, parsed JSON)
        self._named: dict[str, None] = {}  # the first models requests named, for /metrics

    # --- resolution (memory only) --------------------------------------------------------------

    def _table(self, model: str) -> tuple[Window, bool]:
        """The config or built-in entry for ``model`` and whether /models should be asked."""
        found = self._static.get(model)
        if found is None:
            configured = _match(model, self._config)
            family: tuple[str, Family] | None = None
            if configured is not None:
                info = configured[1]
                found = (Window(info.context_window, info.encoding, "config"), False)
            elif (family := _match(model, self._families)) is not None:
                f = family[1]
                found = (Window(f.context_window, f.encoding, "built-in"), f.discover)
            else:
                found = (Window(None, DEFAULT_ENCODING, "unknown"), True)
            if len(self._static) >= MAX_MODELS:  # model names come from clients
                self._static.clear()
            self._static[model] = found
        return found

    def resolve(self, model: str) -> Window:
        table, _ = self._table(model)
        learned = self._learned.get(model)
        if learned is not None and (table.context_window is None or learned < table.context_window):
            return Window(learned, table.encoding, "learned")
        if table.source == "config":
            return table
        if learned is not None:
            return Window(learned, table.encoding, "learned")
        discovered = self._discovered.get(model)
        if discovered is not None and discovered.window is not None:
            return Window(discovered.window, table.encoding, "discovered")
        return table

    def rows(self, factors: Mapping[str, float]) -> list[ModelRow]:
        """/metrics rows: the first models requests named, each with its window, the window's
        source and its token factor; the mean factor of all later ones as "other"."""
        rows = [
            ModelRow(m, w.context_window, w.source, factors.get(m, 1.0))
            for m in self._named
            for w in (self.resolve(m),)
        ]
        others = [f for m, f in factors.items() if m not in self._named]
        if others:
            rows.append(ModelRow("other", None, "unknown", sum(others) / len(others)))
        return rows

    # --- learning ------------------------------------------------------------------------------

    def learn(self, model: str, status: int, body: bytes) -> int | None:
        """Remember the window an overflow answer states (``body``: decoded); returns it (None:
        not an overflow answer, or one that states no window)."""
        window = window_from_error(body) if is_overflow_error(status, body) else None
        if window is None or not model:
            return None
        if self._learned.get(model) != window:
            logger.info("model %r: window %d learned from an overflow answer", model, window)
            self._listeners.emit(WindowLearned(model, window))
        self._learned.put(model, window)
        return window

    # --- discovery -----------------------------------------------------------------------------

    def want(self, model: str, credentials: Credentials, policy: PolicySettings) -> None:
        """Called for each compacted request: start discovering ``model``'s window if that may
        help, and warn once when a window-only policy meets a model nobody knows."""
        if not model:
            return
        if model not in self._named and len(self._named) < MAX_LABELLED:
            self._named[model] = None
        _, discover = self._table(model)
        now = self._clock()
        if discover and self._upstream.discover_windows and model not in self._learned:
            known = self._discovered.get(model)
            if (known is None or now >= known.retry_at) and model not in self._tasks:
                self._start(model, credentials)
        if (
            self.resolve(model).context_window is None
            and model not in self._tasks
            and model not in self._warned
            and relies_on_window(policy)
        ):
            self._warned.put(model, True)
            logger.warning(
                "model %r: context window unknown%s; its conversations are not compacted by "
                "context_fraction until an overflow answer tells the window (or set it under "
                "models:)",
                model,
                " after asking the provider's /models" if self._upstream.discover_windows else "",
            )

    def _start(self, model: str, credentials: Credentials) -> None:
        if len(self._tasks) >= MAX_DISCOVERIES_IN_FLIGHT or self._client() is None:
            return  # a later request will try again
        auth = self._auth(credentials)
        task = asyncio.get_running_loop().create_task(self._discover(model, auth))
        self._tasks[model] = task
        task.add_done_callback(lambda _: self._tasks.pop(model, None))

    def _auth(self, credentials: Credentials) -> RawHeaders:
        """The caller's credential as it is forwarded upstream (or the proxy's own key)."""
        out: RawHeaders = [(b"accept", b"application/json"), (b"accept-encoding", b"identity")]
        key = self._upstream.api_key
        if key is not None:
            return [*out, (b"authorization", b"Bearer " + key.get_secret_value().encode())]
        for name in ("authorization", "api-key"):
            if name in credentials:
                out.append((name.encode(), credentials[name].encode("latin-1")))
        return out

    async def _discover(self, model: str, headers: RawHeaders) -> None:
        outcome, window = "failed", None
        try:
            async with asyncio.timeout(DISCOVERY_TIMEOUT_SECONDS):
                data = await self._listing_for(headers)
                entry = find_entry(data, model)
                window = entry_window(entry) if entry is not None else None
                if entry is not None and needs_props(entry):
                    window = await self._llama_cpp_props(headers, window)
                outcome = "ok" if window is not None else "missing"
        except Exception as exc:  # best effort: a failure only means no window from here
            logger.info("model %r: the provider's /models did not answer (%s)", model, exc)
        now = self._clock()
        previous = self._discovered.get(model)
        if window is None and previous is not None and previous.window is not None:
            window = previous.window  # a failed refresh keeps what was known
        ttl = DISCOVERED_TTL_SECONDS if outcome == "ok" else RETRY_AFTER_SECONDS
        self._discovered.put(model, _Discovered(window, now + ttl))
        if outcome == "ok":
            logger.info("model %r: window %d discovered from the provider's /models", model, window)
        self._listeners.emit(WindowDiscovered(outcome))

    async def _listing_for(self, headers: RawHeaders) -> object:
        now = self._clock()
        if self._listing is not None and now - self._listing[0] < LISTING_REUSE_SECONDS:
            return self._listing[1]
        body = await self._get("/models", headers)
        # A listing of every model a gateway serves is megabytes: parse it off the event loop.
        data = await asyncio.to_thread(json.loads, body)
        self._listing = (now, data)
        return data

    async def _llama_cpp_props(self, headers: RawHeaders, window: int | None) -> int | None:
        """llama.cpp's /props (at the server root) states the context each slot serves."""
        with contextlib.suppress(Exception):
            data = json.loads(await self._get("/props", headers, root=True))
            served = positive(data.get("default_generation_settings", {}).get("n_ctx"))
            if served is not None:
                return min(served, window) if window is not None else served
        return window

    async def _get(self, path: str, headers: RawHeaders, *, root: bool = False) -> bytes:
        client = self._client()
        if client is None:
            raise ConnectionError("the upstream client is closed")
        base = self._upstream.base_url.rstrip("/")
        if root:
            base = base.removesuffix("/v1")
        response = await client.send("GET", base + path, headers, None)
        try:
            if response.status != 200:
                raise ConnectionError(f"GET {path} answered {response.status}")
            # Asked for identity; a gateway may compress all the same.
            decoder = Decoder.of(response.headers, limit=MAX_LISTING_BYTES + 1)
            chunks, size = [], 0
            async for chunk in response.iter_raw():
                chunk = decoder.decode(chunk)
                if not decoder.readable:
                    raise ConnectionError(f"GET {path} came in a coding the proxy cannot read")
                size += len(chunk)
                if size > MAX_LISTING_BYTES:
                    raise ConnectionError(f"GET {path} is larger than {MAX_LISTING_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
