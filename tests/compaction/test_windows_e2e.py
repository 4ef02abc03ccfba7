"""Context windows and calibrated counts on the wire: a real proxy, a provider with a real window
(tests/compaction/windowed.py) and the official openai client."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import httpx
import openai
import pytest

from tests.compaction.windowed import PADDING, WindowedProvider, agent_turn
from tests.support.clients import openai_client
from tests.support.config import COMPACTING, config
from tests.support.mock_upstream import MockUpstream
from tests.support.provider import SYSTEM
from tests.support.servers import ThreadedUvicorn

SERVED = "acme/served-model"  # in no table: only the provider knows its window
CALLER = "sk-caller"  # whose key window discovery may use
# COMPACTING's default policy: summarize ahead of time, trigger context_fraction 0.8.


def vllm_entry(model: str, max_model_len: int | None) -> dict[str, Any]:
    entry = {"id": model, "object": "model", "owned_by": "vllm", "root": model}
    if max_model_len is not None:
        entry["max_model_len"] = max_model_len
    return entry


def metric(server: ThreadedUvicorn, name: str, **labels: str) -> float | None:
    text = httpx.get(f"{server.url}/metrics").text
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def run(server: ThreadedUvicorn, turns: int, *, model: str = SERVED) -> list[list[dict]]:
    """An agent run of ``turns`` user turns; the response headers of each turn's calls."""
    client = openai_client(server, "run-1", key=CALLER)
    history: list[dict[str, Any]] = [SYSTEM]
    seen = []
    for turn in range(turns):
        seen.append(agent_turn(client, history, turn, model=model))
        time.sleep(0.05)  # ahead-of-time summaries run between turns, as in real use
    return seen


# Providers compress their answers (every SDK accepts gzip); some gateways even when asked not to.
CODINGS = pytest.mark.parametrize("coding", [None, "gzip"])


@CODINGS
def test_a_window_known_only_from_models_is_never_exceeded(
    mock: MockUpstream, start_proxy, coding: str | None
) -> None:
    provider = WindowedProvider(mock, window=4096, listing=[vllm_entry(SERVED, 4096)])
    mock.compression, mock.compress_unasked = coding, True
    server = start_proxy(config(COMPACTING, provider=mock.url))
    outcomes = [h["x-compaction"] for turn in run(server, 40) for h in turn]

    assert provider.over_window == []
    assert max(provider.prompts) > 4096 * 0.6  # it did come near the window
    assert outcomes.count("applied") > 20 and provider.summaries >= 3
    assert len(provider.models_requests()) == 1  # discovered once, then cached
    assert provider.models_requests()[0].headers["authorization"] == "Bearer sk-caller"
    assert metric(server, "proxy_model_context_window", model=SERVED, source="discovered") == 4096


@CODINGS
def test_a_model_known_nowhere_overflows_once_then_compacts_ahead(
    mock: MockUpstream, start_proxy, coding: str | None
) -> None:
    provider = WindowedProvider(mock, window=4096, listing=[vllm_entry(SERVED, None)])
    mock.compression = coding
    server = start_proxy(config(COMPACTING, provider=mock.url))
    seen = run(server, 40)

    assert len(provider.over_window) == 1
    retried = [i for i, turn in enumerate(seen) if any("x-compaction-retried" in h for h in turn)]
    assert len(retried) == 1  # the overflow was rescued: the client got an answer
    later = [h["x-compaction"] for turn in seen[retried[0] + 1 :] for h in turn]
    assert later and set(later) == {"applied"}
    assert metric(server, "proxy_model_context_window", model=SERVED, source="learned") == 4096
    assert metric(server, "proxy_windows_learned_total") == 1


@CODINGS
def test_counts_calibrated_by_usage_keep_a_larger_tokenizer_under_the_window(
    mock: MockUpstream, start_proxy, coding: str | None
) -> None:
    # The provider's tokenizer cuts 1.3x the tokens tiktoken counts; its window is 4096 of its
    # own tokens. Uncalibrated, a prompt at 80% of the window by our count would overflow it.
    provider = WindowedProvider(
        mock, window=4096, listing=[vllm_entry(SERVED, 4096)], usage_factor=1.3
    )
    mock.compression = coding
    server = start_proxy(config(COMPACTING, provider=mock.url))
    run(server, 40)

    assert provider.over_window == []
    assert max(provider.prompts) > 4096 * 0.6
    factor = metric(server, "proxy_model_token_factor", model=SERVED)
    assert factor == pytest.approx(1.3, abs=0.02)
    assert metric(server, "proxy_calibration_samples_total", outcome="used") > 20


@CODINGS
def test_streamed_usage_calibrates_too(mock: MockUpstream, start_proxy, coding: str | None) -> None:
    WindowedProvider(mock, window=100_000, listing=[], usage_factor=1.25)
    mock.compression = coding
    server = start_proxy(config(COMPACTING, provider=mock.url))
    client = openai_client(server, "run-1", key=CALLER)
    messages = [SYSTEM, {"role": "user", "content": PADDING * 12}]
    for _ in range(3):
        stream = client.chat.completions.create(
            model=SERVED, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert metric(server, "proxy_model_token_factor", model=SERVED) == pytest.approx(1.25, 0.01)


def test_config_disables_calibration(mock: MockUpstream, start_proxy) -> None:
    WindowedProvider(mock, window=100_000, listing=[], usage_factor=1.25)
    server = start_proxy(config(COMPACTING, provider=mock.url, calibration={"enabled": False}))
    openai_client(server, "run-1", key=CALLER).chat.completions.create(
        model=SERVED, messages=[SYSTEM, {"role": "user", "content": PADDING * 12}]
    )
    assert metric(server, "proxy_model_token_factor", model=SERVED) == 1.0


def test_a_hanging_models_listing_never_delays_a_request(mock: MockUpstream, start_proxy) -> None:
    provider = WindowedProvider(mock, window=100_000, listing=[vllm_entry(SERVED, 4096)])
    provider.listing_delay = 20.0  # longer than the proxy's discovery timeout
    server = start_proxy(config(COMPACTING, provider=mock.url))
    client = openai_client(server, "run-1", key=CALLER)
    started = time.monotonic()
    for turn in range(5):
        reply = client.chat.completions.create(
            model=SERVED, messages=[SYSTEM, {"role": "user", "content": f"turn {turn}"}]
        )
        assert reply.choices[0].message.content.startswith("done")
    assert time.monotonic() - started < 5  # each answer came without waiting for /models
    assert len(provider.models_requests()) == 1  # one lookup in flight per model, not five


def test_each_model_is_looked_up_once(mock: MockUpstream, start_proxy) -> None:
    other = "acme/other-model"
    listing = [vllm_entry(SERVED, 8192), vllm_entry(other, 16384)]
    provider = WindowedProvider(mock, window=100_000, listing=listing)
    server = start_proxy(config(COMPACTING, provider=mock.url))
    for conversation, model in [("a", SERVED), ("b", other)] * 3:
        openai_client(server, conversation, key=CALLER).chat.completions.create(
            model=model, messages=[SYSTEM, {"role": "user", "content": "hello"}]
        )
        time.sleep(0.05)
    assert 1 <= len(provider.models_requests()) <= 2
    assert metric(server, "proxy_model_context_window", model=SERVED, source="discovered") == 8192
    assert metric(server, "proxy_model_context_window", model=other, source="discovered") == 16384
    assert metric(server, "proxy_window_discoveries_total", outcome="ok") == 2


def test_a_configured_window_is_not_looked_up(mock: MockUpstream, start_proxy) -> None:
    provider = WindowedProvider(mock, window=100_000, listing=[vllm_entry(SERVED, 4096)])
    models = {SERVED: {"context_window": 32768}}
    server = start_proxy(config(COMPACTING, provider=mock.url, models=models))
    for _ in range(3):
        openai_client(server, "run-1", key=CALLER).chat.completions.create(
            model=SERVED, messages=[SYSTEM, {"role": "user", "content": "hello"}]
        )
    assert provider.models_requests() == []
    assert metric(server, "proxy_model_context_window", model=SERVED, source="config") == 32768


def test_an_unknown_window_is_warned_once_per_model(
    mock: MockUpstream, start_proxy, caplog: pytest.LogCaptureFixture
) -> None:
    WindowedProvider(mock, window=100_000, listing=None)  # /v1/models answers 404
    with caplog.at_level(logging.WARNING, logger="proxy"):
        server = start_proxy(config(COMPACTING, provider=mock.url))
        for _ in range(4):
            openai_client(server, "run-1", key=CALLER).chat.completions.create(
                model=SERVED, messages=[SYSTEM, {"role": "user", "content": "hello"}]
            )
            time.sleep(0.05)
    startup = [r for r in caplog.records if "compacts on context_fraction" in r.message]
    assert len(startup) == 1 and "'default'" in startup[0].message
    unknown = [r for r in caplog.records if re.search(r"context window unknown", r.message)]
    assert len(unknown) == 1 and SERVED in unknown[0].message


def test_bad_input_and_uncompacted_requests_look_nothing_up(
    mock: MockUpstream, start_proxy
) -> None:
    provider = WindowedProvider(mock, window=100_000, listing=[vllm_entry(SERVED, 4096)])
    server = start_proxy(config(COMPACTING, provider=mock.url))
    with pytest.raises(openai.BadRequestError):
        openai_client(server, "run-1", key=CALLER).chat.completions.create(
            model=SERVED, messages=[{"role": "wizard", "content": "hi"}]
        )
    plain = openai_client(server, None, key=CALLER)
    plain.chat.completions.create(model=SERVED, messages=[SYSTEM, {"role": "user", "content": "x"}])
    time.sleep(0.1)
    assert provider.models_requests() == []
