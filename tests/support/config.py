"""Proxy configurations for tests, written as Python mappings instead of YAML f-strings.

``config(*layers, provider=url, **sections)`` gives Settings; ``config_yaml(...)`` the same as
the text of a YAML file, for what reads a file (``serve``, ``eval``, ``check-config``). Both go
through the proxy's own loader, so a test's configuration is checked as a user's file is.
Layers and sections merge deeply, later ones winning: ``config(COMPACTING, store={"url": url})``
keeps COMPACTING's tenant secret and changes only the store's URL. Lists are replaced whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from proxy.config.settings import Settings, parse_settings

TENANT_SECRET = "tests-tenant-secret-0123456789"
ADMIN = "admin-token-for-tests"
SUMMARIZER_MODEL = "mock-summarizer"  # the model the scripted providers answer as summarizer

# What the compaction tests share: a memory store under a fixed tenant secret, the scripted
# provider's summarizer, and the admin API behind ADMIN.
COMPACTING: Mapping[str, Any] = {
    "store": {"url": "memory://", "tenant_secret": TENANT_SECRET},
    "summarizer": {"model": SUMMARIZER_MODEL, "timeout_seconds": 5},
    "admin": {"token": ADMIN},
}

# Policies more than one test file uses. A summary inline once six interactions arrived, the last
# two kept: the chat tests' pace.
EVERY_SIX_INTERACTIONS: Mapping[str, Any] = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"interactions": 6, "context_fraction": 0},
    "keep": {"interactions": 2},
}
# Every three interactions, the last one kept: a summary within a handful of turns (``talk``).
EVERY_THREE_INTERACTIONS: Mapping[str, Any] = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"interactions": 3, "context_fraction": 0},
    "keep": {"interactions": 1},
}
# Every four interactions, two kept: the fault suites' pace.
EVERY_FOUR_INTERACTIONS: Mapping[str, Any] = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"interactions": 4, "context_fraction": 0},
    "keep": {"interactions": 2},
}
# ``policies:`` entries: one named ``frozen`` that is off (X-Compaction-Policy: frozen).
FROZEN: Mapping[str, Any] = {"frozen": {"strategy": "off"}}
# An agent run: summarized past 3000 input tokens, its newest 1500 tokens kept.
AGENT_RUN: Mapping[str, Any] = {
    "strategy": "summarize",
    "mode": "inline",
    "trigger": {"input_tokens": 3000, "context_fraction": 0},
    "keep": {"tokens": 1500},
}


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """The layers merged into one mapping: nested mappings key by key, anything else replaced."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = merged(out[key], value)
            elif isinstance(value, Mapping):
                out[key] = merged(value)
            else:
                out[key] = value
    return out


def config_data(
    *layers: Mapping[str, Any], provider: str | None = None, **sections: Any
) -> dict[str, Any]:
    """The configuration as plain data; ``provider``: the mock provider's URL (without /v1)."""
    data = merged(*layers, sections)
    if provider is not None:
        data = merged(data, {"upstream": {"base_url": f"{provider}/v1"}})
    return data


def config_yaml(*layers: Mapping[str, Any], provider: str | None = None, **sections: Any) -> str:
    """The configuration as the text of a YAML file."""
    data = config_data(*layers, provider=provider, **sections)
    return yaml.safe_dump(data, sort_keys=False) if data else ""


def config(*layers: Mapping[str, Any], provider: str | None = None, **sections: Any) -> Settings:
    """The configuration as the proxy loads it, with no environment variable applied."""
    return parse_settings(config_yaml(*layers, provider=provider, **sections), environ={})


def summarizing(
    provider: str,
    store_url: str = "memory://",
    *,
    policy: Mapping[str, Any] = EVERY_SIX_INTERACTIONS,
    mode: str = "inline",
    **sections: Any,
) -> Settings:
    """The compaction tests' proxy in front of ``provider``: COMPACTING on ``store_url`` (32
    checkpoints kept), ``policy`` in ``mode`` as the default policy; then ``sections``."""
    base = {
        "store": {"url": store_url, "max_checkpoints": 32},
        "policies": {"default": {**policy, "mode": mode}},
    }
    return config(COMPACTING, base, sections, provider=provider)
