"""Recognising a provider's "your prompt is too long" answer, from its (decoded) text.

Providers say it differently: OpenAI answers 400 with code ``context_length_exceeded``; vLLM,
llama.cpp and others put it in the message (docs/dialects.md). Both the forwarder, which may
retry such a request compacted harder (proxy/proxying/overflow.py), and the model windows, which
learn the window such an answer states (proxy/compaction/models/windows.py), read it here.
"""

from __future__ import annotations

import re

_OVERFLOW = re.compile(
    rb"context_length_exceeded|maximum context length|context (?:window|size|length)"
    rb"|too many tokens|exceeds? the (?:available )?context|prompt is too long",
    re.IGNORECASE,
)
# Overflow messages are a sentence near the start of a small JSON body; 50 slow clients with
# unbounded reads of large error bodies held +587 MB.
ERROR_PREFIX_BYTES = 64 * 1024


def says_overflow(text: bytes) -> bool:
    """``text`` (an error's code and message) says the input is too long."""
    return bool(_OVERFLOW.search(text))


def is_overflow_error(status: int, body: bytes) -> bool:
    """An error answer (``body`` decoded) saying the prompt is too long."""
    return status in (400, 413, 422) and says_overflow(body[:ERROR_PREFIX_BYTES])
