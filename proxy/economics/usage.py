"""What the provider billed for one response, read from the end of its (decoded) body.

The proxy never buffers or re-encodes an answer; it keeps the last few KB of what it relayed
(``ResponseTail``, proxy/compaction/models/calibration.py). Every API puts its usage at the end: the
last key of a JSON body, the last events of a stream. So the reader looks for ``"usage": {``
objects in whatever bytes it is given, plain JSON or SSE, cut anywhere, and decodes each from
its opening brace (a body's first bytes may be missing; its usage is not).

The shapes, from the SDKs' own types:

- chat completions (openai-python ``CompletionUsage``): ``prompt_tokens`` counts every prompt
  token, ``prompt_tokens_details.cached_tokens`` those read from the cache and, from the GPT-5.6
  family on, ``cache_write_tokens`` those written to it; ``completion_tokens``. Streamed, the
  usage comes in the last chunk when the request set ``stream_options.include_usage``.
- Responses (``ResponseUsage``): ``input_tokens`` (every prompt token),
  ``input_tokens_details.cached_tokens`` / ``cache_write_tokens``, ``output_tokens``; streamed,
  in the ``response.completed`` event's response.
- Anthropic Messages (anthropic-sdk-python ``Usage``): ``input_tokens`` counts only what was
  neither read from nor written to the cache (after the last breakpoint), beside
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``; ``output_tokens``. Streamed,
  ``message_start`` carries the input figures and ``message_delta`` (``MessageDeltaUsage``) the
  cumulative ``output_tokens`` and, on the current API, the cumulative input figures again. A
  tail that holds the ``message_delta`` but not its input figures needs the stream's head
  (``message_start``, its first event) as well: pass head and tail together.

Providers that speak these APIs without cache figures (vLLM, llama.cpp) read as nothing cached.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

__all__ = ["AnthropicUsage", "BilledUsage", "OpenAIUsage", "TokenDetails", "Wire", "billed_usage"]

Wire = Literal["chat", "responses", "messages"]  # the dialects' names (proxy/dialects)

# A key "usage" whose value is an object: the name, then `:` before an opening brace. Requiring
# `{` or `,` before the key keeps text inside JSON strings out: there a quote is always escaped
# (`\"usage\"`).
_USAGE_NAME = '"usage"'
_TO_OBJECT = re.compile(r"\s*:\s*(?=\{)")
_DECODER = json.JSONDecoder()


# The usage objects as the SDKs declare them. A provider's body is not trusted to match: each
# count is still checked where it is read (``_count``), so an int here is what is expected, not
# what was proved.


class TokenDetails(TypedDict, total=False):
    cached_tokens: int  # read from the prompt cache
    cache_write_tokens: int  # written to it (OpenAI's GPT-5.6 family on)


class OpenAIUsage(TypedDict, total=False):
    """chat completions' ``usage`` (``prompt_``/``completion_tokens``) and the Responses API's
    (``input_``/``output_tokens``): one reader serves both, each reads its own names."""

    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: TokenDetails
    input_tokens: int
    output_tokens: int
    input_tokens_details: TokenDetails


class AnthropicUsage(TypedDict, total=False):
    input_tokens: int  # neither read from nor written to the cache
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


@dataclass(frozen=True, slots=True)
class BilledUsage:
    """One request's tokens as the provider billed them, in the same four kinds on every API."""

    input_uncached: int  # billed at the full input price
    cached_read: int  # read from the prompt cache
    cache_write: int  # written to the prompt cache (Anthropic; OpenAI's GPT-5.6 family)
    output: int

    @property
    def prompt(self) -> int:
        """Every prompt token, however billed."""
        return self.input_uncached + self.cached_read + self.cache_write


def billed_usage(body: bytes, wire: Wire) -> BilledUsage | None:
    """The usage at the end of ``body`` (a whole decoded body, its tail, or a stream's head
    and tail joined) read as ``wire``'s shape; None when it holds none that can be read."""
    found = _usage_objects(body.decode("utf-8", errors="replace"))
    if not found:
        return None
    if wire == "messages":
        return _anthropic(cast("list[AnthropicUsage]", found))
    return _openai(cast("OpenAIUsage", found[-1]), wire)


def _usage_objects(text: str) -> list[dict[str, Any]]:
    """Every ``"usage": {...}`` object in ``text`` that decodes, in order: JSON as it came in
    (any keys, any values), read as the wire's usage shape by the caller."""
    out = []
    # The name found by ``str.find``, then what comes before and after it checked: a regular
    # expression of the whole key tries every brace and comma of the body, several times slower.
    at = text.find(_USAGE_NAME)
    while at >= 0:
        end = at + len(_USAGE_NAME)
        opened = _TO_OBJECT.match(text, end) if _after_open(text, at) else None
        if opened is not None:
            try:
                value, _ = _DECODER.raw_decode(text, opened.end())
            except ValueError:  # cut off by the end of the tail, or not JSON at all
                value = None
            if isinstance(value, dict):
                out.append(value)
        at = text.find(_USAGE_NAME, end)
    return out


def _after_open(text: str, at: int) -> bool:
    """Whether ``text[at]`` follows ``{`` or ``,`` and whitespace only (``\\s``, as ``re`` has it)."""
    before = at - 1
    while before >= 0 and text[before].isspace():
        before -= 1
    return before >= 0 and text[before] in "{,"


def _count(value: object) -> int | None:
    """A token count: a non-negative integer, or None (absent, null or of another type)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _openai(usage: OpenAIUsage, wire: Wire) -> BilledUsage | None:
    if wire == "chat":
        prompt, output = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
    else:
        prompt, output = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
        details = usage.get("input_tokens_details")
    if prompt is None or output is None:
        return None
    # Decoded JSON: an object is a dict (not asked of the Mapping ABC, for every answer).
    if not isinstance(details, dict):  # absent, null, or not an object
        details = TokenDetails()
    # A report that does not add up (cached beyond the prompt) is clamped, not trusted whole.
    cached = min(_count(details.get("cached_tokens")) or 0, prompt)
    written = min(_count(details.get("cache_write_tokens")) or 0, prompt - cached)
    return BilledUsage(
        input_uncached=prompt - cached - written,
        cached_read=cached,
        cache_write=written,
        output=output,
    )


def _anthropic(found: list[AnthropicUsage]) -> BilledUsage | None:
    """The last usage object, its input figures taken from the nearest earlier one that has
    them when it has none (a stream's ``message_delta`` after its ``message_start``)."""
    last = found[-1]
    output = _count(last.get("output_tokens"))
    if output is None:
        return None
    source = next((u for u in reversed(found) if _count(u.get("input_tokens")) is not None), None)
    if source is None:
        return None
    return BilledUsage(
        input_uncached=_count(source.get("input_tokens")) or 0,
        cached_read=_count(source.get("cache_read_input_tokens")) or 0,
        cache_write=_count(source.get("cache_creation_input_tokens")) or 0,
        output=output,
    )
