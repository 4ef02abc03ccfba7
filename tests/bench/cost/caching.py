"""The providers' prompt-caching rules, on token pieces (``prompts``) and a simulated clock.

OpenAI, automatic prefix caching (chat completions and Responses alike):
- caching starts at 1,024 prompt tokens and hits come "in increments of 128 tokens"
  (openai/openai-cookbook examples/Prompt_Caching_201.ipynb, 1.1; developers.openai.com
  api/docs/guides/prompt-caching): a hit is the longest run of 128-token blocks, from the start,
  that an earlier request sent, counted only when it reaches 1,024;
- "cached prefixes generally remain active for 5 to 10 minutes of inactivity" with the default
  in-memory retention (the same guide, "Prompt cache retention"): an entry dies
  ``IDLE_SECONDS`` after it was last used. We take the low end, 5 minutes, the same as
  Anthropic's TTL. The guide's "up to one hour" off-peak and the opt-in 24 h retention are not
  modelled;
- ``prompt_cache_key`` "is combined with" the prefix hash to route requests (cookbook 4.4, "think
  of it as a shard key"): prefixes are shared only between requests with the same key, or with
  none. The partition is (model, key); caches are per model.
- no write fee before the GPT-5.6 family (the guide): written tokens are billed as input, so
  ``Usage.written`` is 0 and ``cached_tokens`` is the only figure reported.

Anthropic, explicit breakpoints (docs.claude.com build-with-claude/prompt-caching):
- the prefix is tools, system, messages; a ``cache_control`` mark on a block writes an entry for
  the prefix up to and including that block; at most 4 marks a request (a 5th is a 400);
- a mark reads an entry written at the mark itself or at one of the 20 blocks before it (the
  lookback); entries nowhere else are found, so a prefix that moved past the lookback is billed
  again even where its start is unchanged;
- a prefix shorter than the model's minimum is not cached (1,024 tokens for Sonnet-class models;
  no error, the tokens are billed as input);
- an entry lives 5 minutes, refreshed by every hit ("cache hit or refresh"); the 1 h TTL is not
  modelled;
- usage: ``cache_read_input_tokens`` (the hit), ``cache_creation_input_tokens`` (from the hit to
  the last mark, billed 1.25x), ``input_tokens`` (after the last mark, billed 1x); the three add up
  to the prompt.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from tests.bench.cost.prompts import Block


@dataclass(frozen=True, slots=True)
class Usage:
    """What one request's prompt was billed as."""

    prompt: int  # every input token
    cached: int  # read from the cache
    written: int = 0  # written to the cache, billed apart (Anthropic); 0 on OpenAI

    @property
    def uncached(self) -> int:
        return self.prompt - self.cached - self.written


class TooManyBreakpoints(ValueError):
    """More ``cache_control`` marks than a request may carry (Anthropic answers 400)."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"A maximum of {BreakpointCache.MAX_BREAKPOINTS} blocks with cache_control may be "
            f"provided. Found {found}."
        )


def _digest(previous: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(previous + data, digest_size=16).digest()


class PrefixCache:
    """OpenAI's automatic prefix caching (see the module docstring)."""

    MIN_TOKENS = 1024
    BLOCK_TOKENS = 128
    IDLE_SECONDS = 300.0

    def __init__(self, *, idle_seconds: float = IDLE_SECONDS) -> None:
        self._idle = idle_seconds
        self._last_used: dict[Hashable, dict[bytes, float]] = {}  # partition -> block -> time

    def request(self, partition: Hashable, tokens: array, now: float) -> Usage:
        """Bill a prompt of ``tokens`` sent at ``now`` and remember its blocks."""
        total = len(tokens)
        if total < self.MIN_TOKENS:
            return Usage(total, 0)
        seen = self._last_used.setdefault(partition, {})
        data = tokens.tobytes()
        step = self.BLOCK_TOKENS * tokens.itemsize
        digest = b""
        matched = 0
        matching = True
        for i in range(total // self.BLOCK_TOKENS):
            digest = _digest(digest, data[i * step : (i + 1) * step])
            if matching:
                used = seen.get(digest)
                matching = used is not None and now - used <= self._idle
                matched += matching
            seen[digest] = max(now, seen.get(digest, now))
        cached = matched * self.BLOCK_TOKENS
        return Usage(total, cached if cached >= self.MIN_TOKENS else 0)


class BreakpointCache:
    """Anthropic's breakpoint caching (see the module docstring)."""

    MIN_TOKENS = 1024
    LOOKBACK_BLOCKS = 20
    TTL_SECONDS = 300.0
    MAX_BREAKPOINTS = 4

    def __init__(self, *, ttl_seconds: float = TTL_SECONDS) -> None:
        self._ttl = ttl_seconds
        self._expires: dict[Hashable, dict[bytes, float]] = {}  # partition -> prefix -> time

    def request(
        self, partition: Hashable, blocks: Sequence[Block], counts: Sequence[int], now: float
    ) -> Usage:
        """Bill a prompt of ``blocks`` (``counts`` tokens each) sent at ``now``; raises
        TooManyBreakpoints before anything is read or written."""
        marks = [i for i, block in enumerate(blocks) if block.marked]
        if len(marks) > self.MAX_BREAKPOINTS:
            raise TooManyBreakpoints(len(marks))
        ends = list(accumulate(counts))
        total = ends[-1] if ends else 0
        marks = [i for i in marks if ends[i] >= self.MIN_TOKENS]
        if not marks:
            return Usage(total, 0)
        digests = list(accumulate((b.text.encode() for b in blocks), _digest, initial=b""))[1:]
        expires = self._expires.setdefault(partition, {})
        hit = -1
        for mark in marks:
            for j in range(mark, max(mark - self.LOOKBACK_BLOCKS, 0) - 1, -1):
                if now <= expires.get(digests[j], -1.0):
                    hit = max(hit, j)
                    expires[digests[j]] = now + self._ttl  # a hit refreshes the entry
                    break
        for mark in marks:
            expires[digests[mark]] = now + self._ttl
        read = ends[hit] if hit >= 0 else 0
        last = marks[-1]
        return Usage(total, read, ends[last] - read if last > hit else 0)
