"""Hooks: operator code called at two moments of compaction (docs/operations.md).

A hook is a class named in the config (``hooks: [{class: "package.module:ClassName", ...}]``),
built once at start-up with the entry's other keys as keyword arguments. It may define either or
both of two async methods:

    async def before_send(self, request: OutgoingRequest) -> list[dict] | None
        A compacted request is about to go to the provider. ``request.messages`` is a copy of
        what it will receive; return the list to send instead (edited in place or new), or None
        to leave it (VoltAgent's onPrepareMessages).

    async def after_summary(self, event: SummaryEvent) -> None
        A summary was just stored (tenant, conversation, checkpoint with its text). Run after the
        fact, off the request path.

Every call has the entry's ``timeout_seconds``. A hook that raises, times out or returns
something that is not a list of messages is logged (its class and the kind of failure, never
content), counted in ``proxy_hook_calls{outcome!="ok"}``, and the request goes on as if the hook
were absent: hooks fail open, like the rest of compaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter

from proxy.compaction.conversation import Conversation
from proxy.compaction.events import SummaryStored
from proxy.config.settings import HookSettings
from proxy.core.messages import validate_messages
from proxy.core.plan import Plan
from proxy.core.tokens import TokenCounter
from proxy.errors import ConfigError, InvalidRequest
from proxy.events import Listeners
from proxy.ops.export.exporter import Exporter, SummaryEvent

logger = logging.getLogger("proxy.hooks")

STAGES = ("before_send", "after_summary")


@dataclass(frozen=True)
class OutgoingRequest:
    """What ``before_send`` is shown: a compacted request about to be sent."""

    tenant: str  # as the admin API shows it
    conversation_id: str
    policy: str
    model: str
    dialect: str  # the route: "chat" for /v1/chat/completions
    checkpoint: str | None  # the summary checkpoint applied, if any
    # A copy of what the provider is about to receive, chat-shaped (proxy/dialects/base.py):
    # for chat completions, the messages sent as they are.
    messages: list[dict[str, Any]]


@dataclass(frozen=True)
class _Hook:
    name: str  # the configured class path: the metric label
    instance: Any
    timeout: float


class _Failed:
    """What a failed call returns (None is a hook's own answer: "leave it")."""


_FAILED = _Failed()


def load_hook(spec: HookSettings) -> _Hook:
    """Import and build one configured hook; ConfigError naming the class when it cannot be."""
    module_name, _, class_name = spec.class_path.partition(":")
    where = f"hooks: {spec.class_path}"
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import it ({type(exc).__name__}: {exc})") from exc
    try:
        instance = cls(**spec.options)
    except Exception as exc:  # the operator's constructor: whatever it raises, name it
        raise ConfigError(f"{where}: cannot build it ({type(exc).__name__}: {exc})") from exc
    methods = [getattr(instance, stage, None) for stage in STAGES]
    if not any(methods):
        raise ConfigError(f"{where}: defines neither before_send nor after_summary")
    for stage, method in zip(STAGES, methods, strict=True):
        if method is not None and not inspect.iscoroutinefunction(method):
            raise ConfigError(f"{where}: {stage} must be an async method")
    return _Hook(spec.class_path, instance, spec.timeout_seconds)


class Hooks:
    """The configured hooks and summary export: ``before_send`` is the compactor's
    ``proxy.compaction.review.PlanReview``; ``after_summary`` and the export hear each
    ``SummaryStored`` (``subscribe``)."""

    def __init__(
        self,
        hooks: Sequence[_Hook] = (),
        *,
        exporter: Exporter | None = None,
        counter: TokenCounter | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._before = [h for h in hooks if getattr(h.instance, "before_send", None)]
        self._after = [h for h in hooks if getattr(h.instance, "after_summary", None)]
        self._exporter = exporter
        self._counter = counter or TokenCounter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._calls = Counter(
            "proxy_hook_calls",
            "Hook calls, by hook class, stage (before_send, after_summary) and outcome (ok; "
            "error, timeout, invalid: failed open, the request went on without it).",
            ["hook", "stage", "outcome"],
            registry=registry or CollectorRegistry(),
        )

    @property
    def review(self) -> Hooks | None:
        """The plan review the compactor is given: these hooks when one looks at plans
        (``before_send``), else None (no request then waits on a review that does nothing)."""
        return self if self._before else None

    @classmethod
    def build(
        cls,
        specs: Sequence[HookSettings],
        *,
        exporter: Exporter | None,
        counter: TokenCounter,
        registry: CollectorRegistry,
    ) -> Hooks:
        return cls(
            [load_hook(spec) for spec in specs],
            exporter=exporter,
            counter=counter,
            registry=registry,
        )

    async def before_send(self, conv: Conversation, current: Plan) -> Plan:
        """``current`` as the hooks leave it: each in turn may replace the messages sent."""
        if not self._before:
            return current
        messages = current.messages
        for hook in self._before:
            request = OutgoingRequest(
                tenant=conv.tenant,
                conversation_id=conv.conversation_id,
                policy=conv.policy_name,
                model=conv.model,
                dialect=conv.route,
                checkpoint=current.applied_checkpoint,
                # A hook that fails leaves nothing behind; what it gets is plain JSON to edit
                # freely (its own copy, checked again by validate_messages when it returns).
                messages=cast("list[dict[str, Any]]", copy.deepcopy(messages)),
            )
            edited = await self._call(
                hook, "before_send", partial(hook.instance.before_send, request)
            )
            if edited is None or edited is _FAILED or edited == messages:
                continue  # unchanged: an untouched request still goes out as the client's bytes
            try:
                messages = validate_messages(edited, facts=self._counter.facts)
            except InvalidRequest as exc:
                self._failed(hook, "before_send", "invalid", exc.message)
        if messages is current.messages:
            return current
        # Tools and reply priming are counted in tokens_after too: only the messages changed.
        old = sum(self._counter.per_message(current.messages, conv.model))
        new = sum(self._counter.per_message(messages, conv.model))
        return replace(current, messages=messages, tokens_after=current.tokens_after - old + new)

    def subscribe(self, listeners: Listeners) -> None:
        """Hear every summary stored (when a hook or the export wants them)."""
        if self._after or (self._exporter is not None and self._exporter.enabled):
            listeners.subscribe(SummaryStored, self.summary_stored)

    def summary_stored(self, stored: SummaryStored) -> None:
        """A summary was stored: export it and tell the hooks, without waiting for either."""
        if not self._after and (self._exporter is None or not self._exporter.enabled):
            return
        event = SummaryEvent(
            stored.tenant, stored.conversation_id, stored.policy, stored.checkpoint
        )
        if self._exporter is not None:
            self._exporter.publish(event)
        for hook in self._after:
            task = asyncio.create_task(
                self._call(hook, "after_summary", partial(hook.instance.after_summary, event))
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _call(self, hook: _Hook, stage: str, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            result = await asyncio.wait_for(call(), timeout=hook.timeout)
        except TimeoutError:
            self._failed(hook, stage, "timeout", f"over {hook.timeout}s")
        except Exception as exc:  # the operator's code: fail open, whatever it raised
            self._failed(hook, stage, "error", type(exc).__name__)
        else:
            self._calls.labels(hook.name, stage, "ok").inc()
            return result
        return _FAILED

    def _failed(self, hook: _Hook, stage: str, outcome: str, reason: str) -> None:
        self._calls.labels(hook.name, stage, outcome).inc()
        logger.warning(
            "hook %s %s failed (%s: %s); going on without it", hook.name, stage, outcome, reason
        )

    async def aclose(self, grace: float) -> None:
        """Let running after_summary calls and queued exports finish for ``grace`` seconds."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*self._tasks, return_exceptions=True), timeout=grace
                )
        if self._exporter is not None:
            await self._exporter.aclose(grace)
