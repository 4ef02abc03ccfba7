"""What /metrics shows after real traffic."""

from __future__ import annotations

import httpx
import pytest

from proxy.compaction.events import RequestPriced
from proxy.events import Listeners
from proxy.ops.metrics import Metrics
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider, take_turn


@pytest.mark.parametrize("mode", ["inline", "ahead"])
def test_token_counters_are_whole_numbers(mock, start_proxy, mode: str) -> None:
    Provider(mock)
    server = start_proxy(summarizing(mock.url, mode=mode))
    history = [SYSTEM]
    for turn in range(16):
        take_turn(openai_client(server), history, f"Step {turn}: edit src/m{turn}.py " + "x" * turn)
    samples = [
        line
        for line in httpx.get(f"{server.url}/metrics").text.splitlines()
        if "_tokens" in line and not line.startswith("#") and "_created" not in line
    ]
    assert len(samples) >= 4
    for line in samples:
        value = float(line.rsplit(" ", 1)[1])
        assert value == int(value), line


def test_a_scaled_token_count_is_shown_whole() -> None:
    metrics = Metrics()
    metrics.tokens_before.inc(7764.999992609024)  # e.g. a count calibrated by a usage ratio
    metrics.summarizer_tokens.labels("input").inc(0.4)
    text = metrics.render()[0].decode()
    assert "proxy_prompt_tokens_before_total 7765.0" in text
    assert 'proxy_summarizer_tokens_total{kind="input"} 0.0' in text


def test_a_priced_request_shows_every_series_of_its_policy_even_at_zero() -> None:
    metrics, listeners = Metrics(), Listeners()
    metrics.subscribe(listeners)

    def priced(policy: str, *, spent: float, direct: float, cached: int, priced: bool) -> None:
        listeners.emit(RequestPriced(policy, priced, spent, direct, 900, cached, 0, 10))

    priced("a", spent=0.0, direct=0.0, cached=0, priced=False)
    priced("b", spent=0.25, direct=1.0, cached=512, priced=True)
    priced("b", spent=0.5, direct=0.5, cached=0, priced=True)
    text = metrics.render()[0].decode()
    for line in [
        'proxy_dollars_total{kind="spent",policy="a"} 0.0',
        'proxy_dollars_total{kind="direct",policy="a"} 0.0',
        'proxy_dollars_saved{policy="a"} 0.0',
        'proxy_dollars_net_saved{policy="a"} 0.0',
        'proxy_billed_prompt_tokens_total{kind="all",policy="a"} 900.0',
        'proxy_billed_prompt_tokens_total{kind="cached",policy="a"} 0.0',
        'proxy_billed_prompt_tokens_total{kind="cache_write",policy="a"} 0.0',
        'proxy_unpriced_requests_total{policy="a"} 1.0',
        'proxy_dollars_total{kind="spent",policy="b"} 0.75',
        'proxy_dollars_total{kind="direct",policy="b"} 1.5',
        'proxy_dollars_saved{policy="b"} 0.75',
        'proxy_billed_prompt_tokens_total{kind="all",policy="b"} 1800.0',
        'proxy_billed_prompt_tokens_total{kind="cached",policy="b"} 512.0',
        'proxy_billed_prompt_tokens_total{kind="cache_write",policy="b"} 0.0',
    ]:
        assert line in text
    assert 'proxy_unpriced_requests_total{policy="b"}' not in text


def test_added_latency_is_the_proxys_own_time_before_the_provider(mock, start_proxy) -> None:
    """An inline summary is time the proxy adds: it shows in proxy_added_latency_seconds; a
    request passed through adds well under the summary's delay."""
    provider = Provider(mock)
    provider.summary_delay = 0.3
    server = start_proxy(summarizing(mock.url))  # inline, every six interactions
    history = [SYSTEM]
    for turn in range(8):
        take_turn(openai_client(server), history, f"Step {turn}: edit src/m{turn}.py " + "x" * 400)
    assert provider.summaries >= 1
    openai_client(server, conversation=None).models.list()

    def sample(name: str, route: str) -> float:
        text = httpx.get(f"{server.url}/metrics").text
        line = next(x for x in text.splitlines() if x.startswith(f'{name}{{route="{route}"}}'))
        return float(line.rsplit(" ", 1)[1])

    # One observation per chat request the provider received (the summarizer's are not ours).
    assert sample("proxy_added_latency_seconds_count", "chat") == len(provider.chat_requests())
    assert sample("proxy_added_latency_seconds_sum", "chat") >= 0.3 * provider.summaries
    assert sample("proxy_added_latency_seconds_count", "passthrough") == 1
    assert sample("proxy_added_latency_seconds_sum", "passthrough") < 0.3
