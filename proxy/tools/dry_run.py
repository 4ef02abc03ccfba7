"""A dry run of a policy on a conversation: what the proxy would plan for it, with no stored state.

The same plan as the admin preview (``plan_view.describe_plan``), for a body read from a file.
Nothing is called unless ``summarize`` asks the configured summarizer for the summary the plan
wants, exactly as the proxy would ask for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from proxy.compaction.models.windows import ModelWindows
from proxy.compaction.policies import choose_policy
from proxy.compaction.summaries.summarizer import summarizer_factory
from proxy.config.settings import Settings
from proxy.core.messages import validate_messages
from proxy.core.plan import Plan
from proxy.core.planner import plan
from proxy.core.policy import ModelInfo, PolicySettings
from proxy.core.tokens import TokenCounter, lookup_model
from proxy.errors import InvalidRequest

DEFAULT_MODEL = "gpt-4o"


@dataclass(frozen=True)
class DryRun:
    """One planned conversation and what it was planned with."""

    body: dict[str, Any]
    model: str
    model_info: ModelInfo | None
    policy_name: str
    policy: PolicySettings
    counter: TokenCounter
    plan: Plan
    window_source: str = "unknown"  # config, built-in (learned and discovered: at run time)


def load_conversation(path: str | Path) -> dict[str, Any]:
    """A chat completion body, or a bare message list turned into one; InvalidRequest if not."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise InvalidRequest(f"{path} is not valid JSON: {exc}") from exc
    if isinstance(data, list):
        return {"messages": data}
    if not isinstance(data, dict) or "messages" not in data:
        raise InvalidRequest(f"{path}: expected a request body with messages, or a message list")
    return data


def dry_run(
    settings: Settings, body: dict[str, Any], *, policy_name: str | None, model: str | None
) -> DryRun:
    """Plan ``body`` with no stored state, as the admin preview does."""
    model = model or body.get("model") or DEFAULT_MODEL
    if policy_name is None:
        policy_name, policy = choose_policy(settings, {}, model=model, tenant="")
    elif policy_name in settings.policies:
        policy = settings.policies[policy_name]
    else:
        known = ", ".join(settings.policies)
        raise InvalidRequest(f"no configured policy named {policy_name!r} (have: {known})")
    messages = validate_messages(body.get("messages"))
    table = settings.model_table()
    counter = TokenCounter(table)
    info = lookup_model(model, table)
    # offline: config or built-in
    source = ModelWindows(settings.models, settings.upstream).resolve(model).source
    planned = plan(
        messages,
        policy,
        model=model,
        counter=counter,
        model_info=info,
        prior=None,
        tools=body.get("tools"),
    )
    return DryRun(body, model, info, policy_name, policy, counter, planned, source)


async def summarize(settings: Settings, run: DryRun, *, authorization: str | None) -> DryRun:
    """The plan with the summary it asks for, written by the configured summarizer."""
    wanted = run.plan.summary_request
    if wanted is None:
        return run
    own = settings.summarizer.for_policy(run.policy, request_model=run.model)
    # Each call is bounded by the client's timeout (a timeout is a SummarizerError); a long,
    # chunked summary may take several calls, which a user at a terminal can interrupt.
    async with httpx.AsyncClient(timeout=own.timeout_seconds, trust_env=False) as client:
        credentials = {"authorization": authorization} if authorization else None
        summarizer = summarizer_factory(
            settings.summarizer, settings.upstream, settings.model_table(), client, run.counter
        )(credentials, own)
        text = await summarizer.summarize(
            wanted.messages,
            previous=wanted.previous,
            model=own.model,
            max_tokens=own.max_summary_tokens,
        )
    return replace(run, plan=run.plan.with_summary(text))
