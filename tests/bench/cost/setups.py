"""The ways a transcript is sent: straight to the provider, or through a proxy under a policy.

A setup with a ``policy`` starts its own proxy for the run (real uvicorn on a free port, options
as ``serve`` uses, memory store) from a config written for the run: the bench's provider as
upstream (both APIs), its models with a 200k window, its summarizer model, and the policy's
YAML. Add a setup to ``SETUPS`` to measure another one (a ``native`` one, say).

The simulated clock: the provider takes each request's time from ``X-Bench-Clock``, and the
proxy reads the same ``SimClock`` (``create_app(clock=...)``), so its warm-cache test sees the
transcript's pauses.

A proxy's decisions depend on the prices it is told (the price trigger): each proxied
setup runs once per price model, its config's ``pricing:`` naming that model's prices for the
bench's models and summarizer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from proxy.app import create_app
from proxy.config.settings import Settings, parse_settings
from proxy.server.run import uvicorn_options
from tests.bench.cost.native_setup import NATIVE_SETUPS
from tests.bench.cost.prices import PriceModel
from tests.bench.cost.replay import Target
from tests.support.servers import ThreadedUvicorn
from tests.support.settle import settle

REPO = Path(__file__).resolve().parents[3]
CODING_AGENT_YAML = REPO / "config" / "examples" / "coding-agent.yaml"
SETTLE_SECONDS = 120.0  # an ahead summary of a 150k-token prompt, on a busy machine


class SimClock:
    """The transcript's time, in seconds since it began: set by the bench before each turn."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class BenchModels:
    """What a proxy config must know about the bench's provider."""

    url: str
    models: tuple[str, ...]
    summarizer: str
    window: int


def default_app(settings: Settings, clock: SimClock) -> Any:
    return create_app(settings, clock=clock)


@dataclass(frozen=True)
class Setup:
    name: str
    # The proxy config's policies and overrides (YAML as a dict) for the bench's models;
    # None: the turns go straight to the provider.
    policy: Callable[[BenchModels], dict[str, Any]] | None = None
    make_app: Callable[[Settings, SimClock], Any] = default_app


def _base(bench: BenchModels) -> dict[str, Any]:
    return {
        "server": {"access_log": False, "log_level": "warning"},
        "upstream": {"base_url": f"{bench.url}/v1", "anthropic_base_url": bench.url},
        "store": {"url": "memory://", "tenant_secret": "bench-cost-tenant-secret-0123456789"},
        "summarizer": {"model": bench.summarizer, "timeout_seconds": SETTLE_SECONDS},
        "models": {
            m: {"context_window": bench.window, "encoding": "o200k_base"}
            for m in (*bench.models, bench.summarizer)
        },
    }


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = merged(base[key], value)
        else:
            out[key] = value
    return out


def default_policy(bench: BenchModels) -> dict[str, Any]:
    return {}


def thresholds_only(bench: BenchModels) -> dict[str, Any]:
    """The default policy without its price trigger: the token thresholds alone (the default
    before the price trigger)."""
    return {"policies": {"default": {"trigger": {"pays": False}}}}


def coding_agent_recipe(bench: BenchModels) -> dict[str, Any]:
    """config/examples/coding-agent.yaml as shipped, its summarizer the bench's."""
    recipe = yaml.safe_load(CODING_AGENT_YAML.read_text(encoding="utf-8"))
    recipe["summarizer"] = {**recipe.get("summarizer", {}), "model": bench.summarizer}
    return recipe


SETUPS = (
    Setup("direct"),
    Setup("default", default_policy),
    Setup("thresholds only", thresholds_only),
    Setup("coding-agent.yaml", coding_agent_recipe),
    *(Setup(*setup) for setup in NATIVE_SETUPS),  # strategy native: native_setup.py
)


def pricing(bench: BenchModels, price: PriceModel) -> dict[str, Any]:
    """The ``pricing:`` section telling the proxy ``price`` for every model of the bench."""
    entry = {
        "input": price.input,
        "cached_input": price.cached_input,
        "cache_write": price.cache_write,
        "output": price.output,
    }
    return {"models": {m: entry for m in (*bench.models, bench.summarizer)}}


def config_text(setup: Setup, bench: BenchModels, price: PriceModel) -> str:
    assert setup.policy is not None
    base = {**_base(bench), "pricing": pricing(bench, price)}
    return yaml.safe_dump(merged(base, setup.policy(bench)), sort_keys=False)


@contextlib.contextmanager
def target(
    setup: Setup,
    bench: BenchModels,
    *,
    route: str,
    conversation: str,
    clock: SimClock,
    price: PriceModel,
) -> Iterator[Target]:
    """Where a run sends its turns: the provider itself, or a proxy started for this run."""

    def at(seconds: float) -> None:
        clock.now = seconds

    if setup.policy is None:
        yield Target(bench.url, {}, settle=lambda answered: None, at=at)
        return
    text = config_text(setup, bench, price)
    settings = parse_settings(text, source=f"<{setup.name}>", environ={})
    app = setup.make_app(settings, clock)
    with ThreadedUvicorn(app, **uvicorn_options(settings)) as server:

        def settled(answered: int) -> None:
            # The ahead-of-time summary a response queued is made before the next turn, as it
            # would be in the 20 s - 3 min between real turns: the figures do not depend on
            # this machine's speed.
            settle(server.url, route=route, answered=answered, timeout=SETTLE_SECONDS)

        yield Target(server.url, {"X-Conversation-Id": conversation}, settle=settled, at=at)
