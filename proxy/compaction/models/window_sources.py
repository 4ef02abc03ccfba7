"""What providers say about a model's context window, read from their answers: a ``/models``
entry (vLLM ``max_model_len``, OpenRouter ``context_length``, llama.cpp ``meta``, LiteLLM
``max_input_tokens``) or a context-overflow error ("maximum context length is N tokens").

Pure parsing, no I/O: ``proxy.compaction.models.windows`` asks and remembers. Whether an answer is an
overflow at all is ``proxy.upstream.overflow_answers`` (the forwarder asks it too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MAX_ERROR_BYTES = 1 << 20
# A window outside this range is a misread, not a model.
MIN_WINDOW, MAX_WINDOW = 16, 100_000_000

# Keys of a /models entry that state a window, as servers spell them.
_ENTRY_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
_NESTED_KEYS = (
    ("top_provider", "context_length"),  # OpenRouter: the provider requests are routed to
    ("model_info", "max_input_tokens"),  # LiteLLM's /model/info
    ("meta", "n_ctx"),  # llama.cpp forks that report the served context
)

# How providers say the window in an overflow answer; the first that matches wins.
_ERROR_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        rb"maximum context length is (\d+)",  # OpenAI, vLLM, Groq, FastChat
        rb"prompt is too long: \d+ tokens > (\d+) maximum",  # Anthropic
        rb"available context size \((\d+) tokens\)",  # llama.cpp's message
        rb'"n_ctx"\s*:\s*(\d+)',  # llama.cpp's exceed_context_size_error
        rb"too large for model with (\d+) maximum context length",  # vLLM (older), Mistral
        rb"maximum model length of (\d+)",  # vLLM: "longer than the maximum model length of N"
        rb"context length of only (\d+)",  # LM Studio
    )
)


def positive(value: object) -> int | None:
    """A window number as stated, if it is one (not a bool, within the plausible range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = int(value)
    return number if MIN_WINDOW <= number <= MAX_WINDOW else None


def entry_window(entry: Mapping[str, Any]) -> int | None:
    """The window a /models entry states (the smallest, when it states several), else None."""
    found = [positive(entry.get(key)) for key in _ENTRY_KEYS]
    for outer, inner in _NESTED_KEYS:
        nested = entry.get(outer)
        if isinstance(nested, Mapping):
            found.append(positive(nested.get(inner)))
    if needs_props(entry):
        # llama.cpp states only the context the model was trained for; the server may run a
        # smaller one (``-c``), which its /props tells (see ModelWindows._discover).
        found.append(positive(entry["meta"].get("n_ctx_train")))
    windows = [w for w in found if w is not None]
    return min(windows) if windows else None


def find_entry(data: object, model: str) -> Mapping[str, Any] | None:
    """The entry of a /models listing (any of its usual shapes) that describes ``model``."""
    entries = data.get("data") if isinstance(data, Mapping) else data
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("id") == model:
            return entry
    # llama.cpp serves its one model under whatever name a request uses.
    only = entries[0] if len(entries) == 1 else None
    if isinstance(only, Mapping) and isinstance(only.get("meta"), Mapping):
        return only
    return None


def needs_props(entry: Mapping[str, Any]) -> bool:
    meta = entry.get("meta")
    return isinstance(meta, Mapping) and positive(meta.get("n_ctx")) is None


def window_from_error(body: bytes) -> int | None:
    """The window an overflow answer states, if it states one."""
    body = body[:MAX_ERROR_BYTES]
    for pattern in _ERROR_PATTERNS:
        match = pattern.search(body)
        if match:
            return positive(int(match.group(1)))
    return None
