"""How each coding agent is pointed at the proxy: the environment and flags its current release
reads for its base URL, and the upstream it talks to when not wrapped.

Checked against Claude Code 2.1.197, Codex CLI 0.171.0 and opencode 1.18.33 (each run against a
local server that logged what arrived):

- Claude Code reads ``ANTHROPIC_BASE_URL`` (without /v1) and calls ``/v1/messages``.
- Codex ignores ``OPENAI_BASE_URL``. ``-c openai_base_url=...`` works but first tries a WebSocket
  on ``/v1/responses`` five times; a model provider of our own with ``supports_websockets=false``
  goes straight to ``POST /v1/responses``, with the key from ``OPENAI_API_KEY``.
- opencode reads ``OPENCODE_CONFIG_CONTENT`` (a JSON config merged over the user's):
  ``provider.<id>.options.baseURL`` for its OpenAI and Anthropic providers, with /v1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

AGENTS = ("claude", "codex", "opencode")

CODEX_PROVIDER = "compaction_proxy"


@dataclass(frozen=True)
class Launch:
    """The agent's command line and the environment variables to set for it."""

    argv: list[str]
    env: dict[str, str]


def launch(
    agent: str,
    proxy_url: str,
    args: Sequence[str],
    *,
    executable: str | None = None,
    environ: Mapping[str, str],
) -> Launch:
    """How to run ``agent`` with ``args`` so that its model requests go to ``proxy_url`` (the
    proxy's root, without /v1); ``executable``: the agent's program (default: its name)."""
    program = [executable or agent]
    root = proxy_url.rstrip("/")
    if agent == "claude":
        return Launch([*program, *args], {"ANTHROPIC_BASE_URL": root})
    if agent == "codex":
        provider = (
            f'{{name="compaction-proxy", base_url="{root}/v1", env_key="OPENAI_API_KEY", '
            'wire_api="responses", supports_websockets=false}'
        )
        overrides = [
            "-c",
            f"model_provider={CODEX_PROVIDER}",
            "-c",
            f"model_providers.{CODEX_PROVIDER}={provider}",
        ]
        return Launch([*program, *overrides, *args], {})
    if agent == "opencode":
        ours = {
            "provider": {
                name: {"options": {"baseURL": f"{root}/v1"}} for name in ("openai", "anthropic")
            }
        }
        theirs = _json_object(environ.get("OPENCODE_CONFIG_CONTENT"))
        return Launch(
            [*program, *args], {"OPENCODE_CONFIG_CONTENT": json.dumps(_merged(theirs, ours))}
        )
    raise ValueError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)}")


def default_config(agent: str) -> dict[str, Any]:
    """The proxy's configuration for ``agent`` when the user gives none: its own provider, and a
    summarizer that provider serves with the key the agent already sends."""
    if agent == "claude":
        # Anthropic serves an OpenAI-compatible chat endpoint on the same host, so the summary
        # call (always chat completions) can carry the caller's own Anthropic key.
        return {
            "upstream": {"base_url": "https://api.anthropic.com/v1"},
            "summarizer": {"model": "claude-haiku-4-5"},
        }
    return {}  # the defaults: OpenAI for chat and responses, Anthropic for /v1/messages


def _json_object(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}  # not ours to fix: opencode reports its own config errors
    return value if isinstance(value, dict) else {}


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out
