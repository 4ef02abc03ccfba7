"""A model without a price (a local model, a gateway's alias) under the shipped default policy:
the official openai client, a real proxy and the scripted provider.

What a user notices: the default decides by price (``trigger.pays``) and otherwise waits for 80%
of the window, which a 200k model's agent session rarely reaches; so an unpriced model's long
session must still be compacted about when a priced model of the same window would be, and the
answer says that its model has no price and what the decision assumed instead.
"""

from __future__ import annotations

from typing import Any

from tests.support.agent_history import TOOLS, agent_history, requests
from tests.support.clients import openai_client
from tests.support.config import COMPACTING, config
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import Provider
from tests.support.settle import settle

WINDOW = 200_000
ROUNDS = 60  # the session reaches about 72k tokens: well under 80% of the window
# Claude Sonnet's prices (a 200k model priced as Anthropic bills it) for the priced twin.
SONNET = {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}


def run_session(mock: MockUpstream, start_proxy: Any, model: str) -> list[dict[str, str]]:
    """The agent session sent request by request as ``model``, the shipped default policy, the
    model's window set under ``models:``; each answer's headers."""
    Provider(mock)
    models = {m: {"context_window": WINDOW, "encoding": "o200k_base"} for m in ("local", "twin")}
    settings = config(
        COMPACTING,
        {"models": {f"my-{m}-model": v for m, v in models.items()}},
        {"pricing": {"models": {"my-twin-model": SONNET}}},
        provider=mock.url,
    )
    server = start_proxy(settings)
    client = openai_client(server, f"session-{model}")
    seen = []
    for n, prefix in enumerate(requests(agent_history(ROUNDS)), start=1):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=prefix, tools=TOOLS
        )
        seen.append(dict(raw.headers))
        settle(server.url, route="chat", answered=n)
    return seen


def first_applied(seen: list[dict[str, str]]) -> int | None:
    outcomes = [h["x-compaction"].split(";")[0] for h in seen]
    return outcomes.index("applied") if "applied" in outcomes else None


def test_an_unpriced_models_long_session_compacts_as_a_priced_ones_does(
    mock: MockUpstream, start_proxy: Any, tiktoken_files: object
) -> None:
    twin = first_applied(run_session(mock, start_proxy, "my-twin-model"))
    mock.received.clear()
    local_seen = run_session(mock, start_proxy, "my-local-model")
    local = first_applied(local_seen)

    assert twin is not None, "the priced twin compacts the session by price"
    assert local is not None, "the unpriced model never compacted a 72k session"
    assert abs(local - twin) <= 6, (local, twin)
    warning = local_seen[0]["x-compaction-warning"]
    assert warning.startswith("unpriced-model"), warning
    assert "reference=" in warning, warning  # what the decision assumed instead
