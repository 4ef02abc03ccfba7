"""The cost bench's mock provider applies the providers' caching rules and reports usage as they
do (tests/bench/cost/caching.py cites the rules). Fast: part of the default suite, so the bench's
instrument cannot drift unnoticed."""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.bench.cost.caching import BreakpointCache, PrefixCache, TooManyBreakpoints, Usage
from tests.bench.cost.prompts import Block
from tests.bench.cost.provider import CLOCK_HEADER, OUTPUT_HEADER, CachingProvider
from tests.support.sdk_clients import closed_after_test
from tests.support.servers import ThreadedUvicorn

# --- OpenAI: automatic prefix caching ------------------------------------------------------------


def tokens(n: int, *, start: int = 0) -> array:
    return array("I", range(start, start + n))


def shared(prefix: int, total: int) -> array:
    """``total`` tokens whose first ``prefix`` are those of ``tokens(...)``, the rest new."""
    return array("I", [*range(prefix), *range(10**6, 10**6 + total - prefix)])


def test_a_prompt_under_1024_tokens_is_never_cached() -> None:
    cache = PrefixCache()
    cache.request("p", tokens(1023), 0)
    assert cache.request("p", tokens(1023), 1) == Usage(1023, 0)


def test_a_repeated_prompt_of_1024_tokens_is_cached_whole() -> None:
    cache = PrefixCache()
    assert cache.request("p", tokens(1024), 0) == Usage(1024, 0)
    assert cache.request("p", tokens(1024), 1) == Usage(1024, 1024)


@pytest.mark.parametrize(
    ("common", "cached"),
    [(1000, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (1299, 1280)],
)
def test_hits_come_in_128_token_blocks_from_1024(common: int, cached: int) -> None:
    cache = PrefixCache()
    cache.request("p", tokens(1400), 0)
    assert cache.request("p", shared(common, 1500), 1) == Usage(1500, cached)


def test_the_longest_prefix_seen_is_the_hit() -> None:
    cache = PrefixCache()
    cache.request("p", tokens(1300), 0)
    cache.request("p", tokens(2000), 1)
    assert cache.request("p", tokens(2100), 2).cached == 1920  # 15 blocks of 2,000


def test_prefixes_are_shared_only_within_one_prompt_cache_key() -> None:
    cache = PrefixCache()
    cache.request(("m", None), tokens(2000), 0)
    assert cache.request(("m", "conversation-1"), tokens(2000), 1).cached == 0
    assert cache.request(("m", "conversation-1"), tokens(2000), 2).cached == 1920
    assert cache.request(("m", None), tokens(2000), 3).cached == 1920


def test_an_entry_idle_longer_than_five_minutes_is_evicted() -> None:
    cache = PrefixCache()
    cache.request("p", tokens(2000), 0)
    assert cache.request("p", tokens(2000), 300).cached == 1920  # idle exactly 5 min: kept
    assert cache.request("p", tokens(2000), 550).cached == 1920  # the hit at 300 refreshed it
    assert cache.request("p", tokens(2000), 851).cached == 0


# --- Anthropic: breakpoints ----------------------------------------------------------------------


def blocks(n: int, *marks: int) -> list[Block]:
    return [Block(f"block {i}", i in marks) for i in range(n)]


HUNDREDS = [100] * 60  # every block 100 tokens: block i ends at (i + 1) * 100


def test_no_mark_no_caching() -> None:
    cache = BreakpointCache()
    cache.request("m", blocks(30), HUNDREDS[:30], 0)
    assert cache.request("m", blocks(30), HUNDREDS[:30], 1) == Usage(3000, 0, 0)


def test_a_mark_under_1024_tokens_writes_nothing() -> None:
    cache = BreakpointCache()
    assert cache.request("m", blocks(30, 9), HUNDREDS[:30], 0) == Usage(3000, 0, 0)
    assert cache.request("m", blocks(30, 9), HUNDREDS[:30], 1) == Usage(3000, 0, 0)


def test_a_mark_writes_its_prefix_and_input_tokens_are_what_follows_the_last_mark() -> None:
    cache = BreakpointCache()
    first = cache.request("m", blocks(30, 10), HUNDREDS[:30], 0)
    assert (first.cached, first.written, first.uncached) == (0, 1100, 1900)
    again = cache.request("m", blocks(30, 10, 20), HUNDREDS[:30], 1)
    assert (again.cached, again.written, again.uncached) == (1100, 1000, 900)


@pytest.mark.parametrize(("mark", "read"), [(30, 1100), (31, 0)])
def test_a_mark_reads_an_entry_at_most_20_blocks_back(mark: int, read: int) -> None:
    cache = BreakpointCache()
    cache.request("m", blocks(40, 10), HUNDREDS[:40], 0)
    usage = cache.request("m", blocks(40, mark), HUNDREDS[:40], 1)
    assert (usage.cached, usage.written) == (read, (mark + 1) * 100 - read)


def test_an_earlier_mark_reads_what_the_last_one_cannot_reach() -> None:
    cache = BreakpointCache()
    cache.request("m", blocks(60, 10), HUNDREDS, 0)
    usage = cache.request("m", blocks(60, 10, 59), HUNDREDS, 1)
    assert (usage.cached, usage.written, usage.uncached) == (1100, 4900, 0)


def test_a_changed_block_ends_every_match_after_it() -> None:
    cache = BreakpointCache()
    cache.request("m", blocks(30, 10, 29), HUNDREDS[:30], 0)
    edited = blocks(30, 10, 29)
    edited[15] = Block("block 15, cleared", False)
    usage = cache.request("m", edited, HUNDREDS[:30], 1)
    assert (usage.cached, usage.written) == (1100, 1900)


def test_entries_live_five_minutes_refreshed_by_each_hit() -> None:
    cache = BreakpointCache()
    cache.request("m", blocks(30, 10), HUNDREDS[:30], 0)
    assert cache.request("m", blocks(30, 10), HUNDREDS[:30], 300).cached == 1100
    assert cache.request("m", blocks(30, 10), HUNDREDS[:30], 590).cached == 1100
    assert cache.request("m", blocks(30, 10), HUNDREDS[:30], 891).cached == 0


def test_more_than_four_marks_are_refused_before_anything_is_written() -> None:
    cache = BreakpointCache()
    assert cache.request("m", blocks(40, 10, 20, 30, 39), HUNDREDS[:40], 0).written == 4000
    with pytest.raises(TooManyBreakpoints, match="Found 5"):
        cache.request("m", blocks(50, 10, 20, 30, 40, 49), HUNDREDS[:50], 1)
    assert cache.request("m", blocks(50, 49), HUNDREDS[:50], 2).cached == 4000


# --- the served provider: usage as the SDKs read it ----------------------------------------------

SUMMARIZER = "bench-summarizer"
# About 1,500 tokens: over every minimum, so a repeated prompt is cached.
LONG = "The quick brown fox checks the build logs before lunch. " * 130


@pytest.fixture(scope="module")
def served(tiktoken_cache_dir: object) -> Iterator[tuple[CachingProvider, str]]:
    provider = CachingProvider(summarizer_model=SUMMARIZER, models=("bench-gpt",))
    with ThreadedUvicorn(provider.app) as server:
        yield provider, server.url


@pytest.fixture
def provider(served: tuple[CachingProvider, str]) -> CachingProvider:
    served[0].reset()
    return served[0]


@pytest.fixture
def url(served: tuple[CachingProvider, str]) -> str:
    return served[1]


def openai_client(url: str) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0))


def anthropic_client(url: str) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    return closed_after_test(client)


def at(seconds: float, output: int | None = None) -> dict[str, str]:
    headers = {CLOCK_HEADER: str(seconds)}
    return headers | ({OUTPUT_HEADER: str(output)} if output is not None else {})


def test_chat_usage_plain_and_streamed(provider: CachingProvider, url: str) -> None:
    client = openai_client(url)
    history = [{"role": "system", "content": LONG}, {"role": "user", "content": "Hello"}]
    first = client.chat.completions.create(
        model="bench-gpt", messages=history, extra_headers=at(0, output=42)
    )
    assert first.usage.prompt_tokens > 1024
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.usage.completion_tokens == 42
    history += [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "More?"}]
    chunks = list(
        client.chat.completions.create(
            model="bench-gpt",
            messages=history,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=at(30),
        )
    )
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and all(c.usage is None for c in chunks[:-1])
    cached = usage.prompt_tokens_details.cached_tokens
    assert 1024 <= cached < usage.prompt_tokens and cached % 128 == 0
    lines = provider.lines()
    assert [(line.usage.cached, line.output, line.streamed, line.at) for line in lines] == [
        (0, 42, False, 0.0),
        (cached, usage.completion_tokens, True, 30.0),
    ]


def test_the_clock_header_expires_entries(provider: CachingProvider, url: str) -> None:
    client = openai_client(url)
    history = [{"role": "system", "content": LONG}, {"role": "user", "content": "Hello"}]
    for seconds in (0, 200, 501):
        client.chat.completions.create(
            model="bench-gpt", messages=history, extra_headers=at(seconds)
        )
    assert [line.usage.cached > 0 for line in provider.lines()] == [False, True, False]


def test_a_summarizer_call_is_answered_with_a_tenth_of_its_prompt_and_billed(
    provider: CachingProvider, url: str
) -> None:
    client = openai_client(url)
    history = [{"role": "system", "content": LONG}, {"role": "user", "content": "Summarize."}]
    client.chat.completions.create(model="bench-gpt", messages=history, extra_headers=at(10))
    answer = client.chat.completions.create(model=SUMMARIZER, messages=history, max_tokens=100)
    assert answer.usage.completion_tokens == 100  # a tenth of ~1,500 tokens, capped at 100
    assert len(answer.choices[0].message.content) > 300
    line = provider.lines()[-1]
    assert (line.summarizer, line.clocked, line.at, line.output) == (True, False, 10.0, 100)


def test_responses_usage_plain_and_streamed(provider: CachingProvider, url: str) -> None:
    client = openai_client(url)
    first = client.responses.create(
        model="bench-gpt", instructions=LONG, input="Hello", extra_headers=at(0)
    )
    assert first.usage.input_tokens > 1024 and first.usage.input_tokens_details.cached_tokens == 0
    events = list(
        client.responses.create(
            model="bench-gpt",
            instructions=LONG,
            input="Hello again",
            stream=True,
            extra_headers=at(5),
        )
    )
    assert events[-1].type == "response.completed"
    assert events[-1].response.usage.input_tokens_details.cached_tokens >= 1024


def test_messages_usage_plain_and_streamed(provider: CachingProvider, url: str) -> None:
    client = anthropic_client(url)
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    first = client.messages.create(
        model="bench-claude",
        max_tokens=100,
        system=system,
        messages=[{"role": "user", "content": "Hello"}],
        extra_headers=at(0, output=7),
    )
    written = first.usage.cache_creation_input_tokens
    assert written > 1024 and first.usage.cache_read_input_tokens == 0
    assert 0 < first.usage.input_tokens < 10 and first.usage.output_tokens == 7
    with client.messages.stream(
        model="bench-claude",
        max_tokens=100,
        system=system,
        messages=[{"role": "user", "content": "Hello again"}],
        extra_headers=at(60, output=9),
    ) as stream:
        usage = stream.get_final_message().usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (written, 0)
    assert usage.output_tokens == 9
    line = provider.lines()[-1]
    assert (line.usage.cached, line.usage.uncached, line.streamed) == (
        written,
        usage.input_tokens,
        True,
    )


def test_five_cache_marks_are_a_400_in_anthropic_shape(provider: CachingProvider, url: str) -> None:
    client = anthropic_client(url)
    mark = {"cache_control": {"type": "ephemeral"}}
    system = [{"type": "text", "text": f"part {i}", **mark} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="Found 5") as raised:
        client.messages.create(
            model="bench-claude",
            max_tokens=10,
            system=system,
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert provider.lines() == []
