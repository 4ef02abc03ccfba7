"""Token counts against OpenAI's published numbers, the estimates, the cache and the fallback."""

from __future__ import annotations

import logging

import pytest
import tiktoken

from proxy import wirejson
from proxy.config.settings import Settings
from proxy.core import tokens as tokens_module
from proxy.core.policy import ModelInfo
from proxy.core.tokens import (
    COUNT_PIECE_CHARS,
    IMAGE_HIGH_TOKENS,
    IMAGE_LOW_TOKENS,
    KEPT_TEXT_CHARS,
    KEPT_TEXTS,
    TokenCounter,
    lookup_model,
)

# OpenAI cookbook, "How to count tokens with tiktoken": these messages bill 129 prompt tokens on
# gpt-3.5-turbo / gpt-4 and 124 on gpt-4o / gpt-4o-mini (verified there against the API).
COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that "
        "translates corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more "
        "time to touch base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for "
        "the client deliverable.",
    },
]


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-3.5-turbo", 129), ("gpt-4", 129), ("gpt-4o", 124), ("gpt-4o-mini", 124)],
)
def test_counts_match_openai_cookbook(counter: TokenCounter, model: str, expected: int) -> None:
    assert counter.count_messages(COOKBOOK, model) == expected


def test_encoding_comes_from_table_then_tiktoken_then_o200k(tiktoken_files: object) -> None:
    counter = TokenCounter(
        {
            "my-llama*": ModelInfo(context_window=8192, encoding="cl100k_base"),
            "gpt-4o*": ModelInfo(context_window=1, encoding="p50k_base"),
        }
    )
    assert counter.encoding_name("my-llama-3") == "cl100k_base"
    assert counter.encoding_name("gpt-4o") == "p50k_base"  # the user's table wins
    assert counter.encoding_name("gpt-3.5-turbo") == "cl100k_base"
    assert counter.encoding_name("some-unknown-model") == "o200k_base"


def test_special_token_text_is_counted_as_text_not_rejected(counter: TokenCounter) -> None:
    assert counter.count_text("<|endoftext|>", "gpt-4o") > 1


def test_images_audio_files_and_tool_calls_are_estimated(counter: TokenCounter) -> None:
    def parts(*p: dict) -> dict:
        return {"role": "user", "content": list(p)}

    base = counter.count_message(parts(), "gpt-4o")
    low = parts({"type": "image_url", "image_url": {"url": "u", "detail": "low"}})
    high = parts({"type": "image_url", "image_url": {"url": "u"}})
    assert counter.count_message(low, "gpt-4o") - base == IMAGE_LOW_TOKENS
    assert counter.count_message(high, "gpt-4o") - base == IMAGE_HIGH_TOKENS
    # ten seconds of 16 kB/s audio, base64-encoded: about 100 tokens
    audio = parts({"type": "input_audio", "input_audio": {"data": "A" * 213_334, "format": "wav"}})
    assert counter.count_message(audio, "gpt-4o") - base == pytest.approx(100, abs=1)
    file_ref = parts({"type": "file", "file": {"file_id": "file-abc"}})
    assert counter.count_message(file_ref, "gpt-4o") - base == 1000
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a/b.py"}'},
            }
        ],
    }
    assert (
        counter.count_message(call, "gpt-4o")
        > counter.count_message({"role": "assistant", "content": None}, "gpt-4o") + 5
    )


def test_tools_schemas_are_estimated(counter: TokenCounter) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert counter.count_tools(None, "gpt-4o") == 0
    # The cookbook bills this schema at ~ 40-60 tokens; ours must be in that range.
    assert 30 <= counter.count_tools(tools, "gpt-4o") <= 70


def test_second_count_of_a_long_history_tokenizes_nothing_again() -> None:
    """A new request repeating a long history costs no tokenizer work (the speed-up itself, >= 20x,
    is measured by ``make bench``, bench_core; a timed assertion here would be flaky on busy CI)."""
    encoded: list[str] = []

    class Words:  # an encoding that records what it was asked to tokenize
        def encode_ordinary(self, text: str) -> list[str]:
            encoded.append(text)
            return text.split()

    counter = TokenCounter(load_encoding=lambda name: Words())
    history = [
        {
            "role": "user" if i % 2 else "assistant",
            "content": f"message {i} " + "lorem ipsum dolor sit amet " * 150,
        }
        for i in range(300)
    ]
    first = counter.count_messages(history, "gpt-4o")
    assert len(encoded) >= 300
    encoded.clear()
    copy = [dict(m) for m in history]  # new objects, same content: a new request
    assert counter.count_messages(copy, "gpt-4o") == first
    assert encoded == []
    edited = [*copy[:-1], {**copy[-1], "content": "changed"}]
    assert counter.count_messages(edited, "gpt-4o") < first
    assert encoded == [copy[-1]["role"], "changed"]  # only the edited message is tokenized


def test_cache_is_bounded_and_keyed_by_content(tiktoken_files: object) -> None:
    counter = TokenCounter(cache_size=2)
    a, b, c = ({"role": "user", "content": t} for t in ("one", "two two", "three three three"))
    counts = [counter.count_message(m, "gpt-4o") for m in (a, b, c)]
    assert len(counter.facts) <= 2
    assert counter.count_message({"role": "user", "content": "one"}, "gpt-4o") == counts[0]
    assert (
        counter.count_message({"role": "user", "content": "one", "name": "x"}, "gpt-4o")
        > (counts[0])
    )


def test_unloadable_encoding_warns_once_and_approximates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def offline(name: str) -> object:
        raise OSError("no route to host")

    counter = TokenCounter(load_encoding=offline)
    with caplog.at_level(logging.WARNING, logger="proxy.core.tokens"):
        n = counter.count_messages([{"role": "user", "content": "x" * 400}], "gpt-4o")
        counter.count_messages([{"role": "user", "content": "y"}], "gpt-3.5-turbo")
    assert counter.approximate
    assert 100 <= n <= 120  # 400 bytes / 4, plus overheads
    assert len([r for r in caplog.records if "approximate" in r.getMessage()]) == 1


def test_lookup_model_uses_first_matching_glob() -> None:
    table = Settings(models={"gpt-4o-mini*": {"context_window": 1000}}).model_table()
    assert lookup_model("gpt-4o-mini-2024", table).context_window == 1000
    assert lookup_model("gpt-4o-2024-08-06", table).context_window == 128_000
    assert lookup_model("gpt-4-0613", table).context_window == 8192
    assert lookup_model("claude-3", table).context_window == 200_000  # built-in families
    assert lookup_model("mystery-model", table) is None


@pytest.mark.parametrize(
    "text",
    [
        "The configured value was cached again, see src/mod_7.py. " * 12_000,
        "0001 normalized 7919 src/m1/f1.py\n  indented\ttab  runs   of spaces\n" * 11_000,
        "漢字 and émigré 😀, " * 40_000,
        "x" * 300_000 + " tail",
    ],
    ids=["prose", "log", "unicode", "no-spaces"],
)
def test_a_long_text_counted_in_pieces_counts_as_the_whole(
    text: str, counter: TokenCounter, tiktoken_files: object
) -> None:
    """Pieces are cut where tiktoken's pre-tokenizer cuts too (one 24 MB list of
    tokens held the GIL for ~70 ms), so the count is tiktoken's for the whole text."""
    assert len(text) > COUNT_PIECE_CHARS
    whole = len(tiktoken.get_encoding("o200k_base").encode_ordinary(text))
    assert counter.count_text(text, "gpt-4o") == whole


def test_a_text_counted_again_is_tokenized_once_and_the_kept_counts_are_bounded() -> None:
    """A stored summary is weighed on every request of its conversation: counted once, kept by
    its value (per encoding), within a bound on texts and characters."""
    encoded: list[str] = []

    class Words:
        def encode_ordinary(self, text: str) -> list[str]:
            encoded.append(text)
            return text.split()

    counter = TokenCounter(
        {"small-*": ModelInfo(context_window=1000, encoding="cl100k_base")},
        load_encoding=lambda name: Words(),
    )
    summary = "the user asked for a refactor " * 20
    assert counter.count_again(summary, "gpt-4o") == counter.count_text(summary, "gpt-4o")
    encoded.clear()
    again = summary[:10] + summary[10:]  # equal, another object: as a record read again
    assert again is not summary
    assert counter.count_again(again, "gpt-4o") == 120
    assert encoded == []
    with counter.facts.request() as facts:  # a request's view shares what is kept
        assert counter.with_facts(facts).count_again(summary, "gpt-4o") == 120
    assert encoded == []
    assert counter.count_again(summary, "small-1") == 120  # another encoding: counted
    assert encoded == [summary]
    for i in range(KEPT_TEXTS + 10):
        assert counter.count_again(f"text {i}", "gpt-4o") == 2
    assert len(counter.kept) <= KEPT_TEXTS
    big = "word " * (KEPT_TEXT_CHARS // 5 + 1)
    assert counter.count_again(big, "gpt-4o") == KEPT_TEXT_CHARS // 5 + 1
    assert counter.kept.chars <= KEPT_TEXT_CHARS


def test_tools_sent_again_are_counted_once_by_their_exact_json() -> None:
    """An agent sends the same tools on every request: counted once, kept by their JSON text,
    so that equal tools in new objects cost no tokenizer work, and tools that differ in any
    way their count sees (a NaN where another has null, 1 where another has 1.0) are counted."""
    encoded: list[str] = []

    class Words:
        def encode_ordinary(self, text: str) -> list[str]:
            encoded.append(text)
            return text.split()

    counter = TokenCounter(load_encoding=lambda name: Words())

    def tools(description: str, bound: object = 1) -> list[dict]:
        schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": bound}}}
        return [
            {
                "type": "function",
                "function": {"name": "f", "description": description, "parameters": schema},
            }
        ]

    first = counter.count_tools(tools("reads a file"), "gpt-4o")
    assert encoded
    encoded.clear()
    assert counter.count_tools(tools("reads a file"), "gpt-4o") == first  # new objects
    assert encoded == []
    assert counter.count_tools(tools("reads a file or two"), "gpt-4o") == first + 2

    class Characters:  # "NaN" and "null" count apart
        def encode_ordinary(self, text: str) -> list[str]:
            return list(text)

    counter = TokenCounter(load_encoding=lambda name: Characters())
    whole = TokenCounter(load_encoding=lambda name: Characters())  # nothing kept: asked apart
    for bound in (1, 1.0, None, float("nan"), wirejson.NonFinite("nan"), float("inf"), 1):
        expected = whole._count_tools(tools("x", bound), "o200k_base")
        assert counter.count_tools(tools("x", bound), "gpt-4o") == expected, bound
    kept = len(counter.kept)
    assert counter.count_tools(tools("x", float("nan")), "gpt-4o")
    assert len(counter.kept) == kept  # written alike each time: kept once


def test_a_requests_tools_are_written_once_however_often_it_plans_them(
    monkeypatch: pytest.MonkeyPatch, counter: TokenCounter
) -> None:
    """Through a request's view (a parsed body, never changed) the same tools object is not
    written again to be looked up; a caller's own list, changed in place, is counted again."""
    written: list[object] = []
    key = tokens_module._tools_key
    monkeypatch.setattr(tokens_module, "_tools_key", lambda tools: written.append(1) or key(tools))
    tools = [{"type": "function", "function": {"name": "f", "description": "reads a file"}}]
    with counter.facts.request() as facts:
        view = counter.with_facts(facts)
        first = view.count_tools(tools, "gpt-4o")
        assert view.count_tools(tools, "gpt-4o") == first
        assert counter.with_facts(facts).count_tools(tools, "gpt-4o") == first
    assert len(written) == 1
    assert counter.count_tools(tools, "gpt-4o") == first and len(written) == 2
    tools[0]["function"]["description"] = "reads a file, then another, then a third"
    assert counter.count_tools(tools, "gpt-4o") > first


def test_texts_kept_through_request_views_stay_within_the_bound() -> None:
    """Each request counts through its own view of the counter: what the views keep is one
    store, held to its bound on characters however many views added to it."""
    counter = TokenCounter(load_encoding=lambda name: WordsOnly())
    size = KEPT_TEXT_CHARS // 3
    for i in range(12):
        with counter.facts.request() as facts:
            text = f"{i} " + "w" * size
            view = counter.with_facts(facts)
            assert view.count_again(text, "gpt-4o") == counter.count_text(text, "gpt-4o")
    held = sum(len(key[1]) for key in counter.kept._counts)
    assert held <= KEPT_TEXT_CHARS


class WordsOnly:
    def encode_ordinary(self, text: str) -> list[str]:
        return text.split()
