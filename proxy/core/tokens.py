"""Token counting the way OpenAI bills chat input, cached so a long history is counted once.

Text follows OpenAI's cookbook ("How to count tokens with tiktoken"): every message costs 3
tokens plus the tokens of its role and content, a ``name`` costs its tokens plus 1, and every
request is primed with 3 more. What the cookbook does not cover is estimated by these rules:

- image part: 85 tokens at ``detail: low``, otherwise 765 (a 1024x1024 image at high detail:
  85 + 4 tiles x 170); the image itself is never downloaded to measure it.
- audio part: 10 tokens per second, assuming 16,000 bytes of (base64-decoded) audio a second.
- file part: 1 token per 8 bytes of inline file data, or 1,000 for a reference by file id.
- tool call (and legacy function_call): tokens of its name and arguments plus 3.
- ``tools`` schemas: 12 tokens once, plus per function 7 + its name, description and JSON
  parameters (close to the cookbook's function-calling estimate, simpler to keep right).

The encoding comes from the model table (first matching glob), else tiktoken's own model map,
else o200k_base. When tiktoken's files cannot be loaded (an air-gapped machine without the
baked-in files) one warning is logged and a 4-bytes-per-token approximation is used instead.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from functools import partial
from itertools import accumulate
from typing import Any

import orjson
import tiktoken

from proxy.core.carried import CARRY_FROM, Carried
from proxy.core.facts import FactCache, FactLookup, Facts
from proxy.core.interactions import Groupings, Summed
from proxy.core.kept_counts import KeptCounts
from proxy.core.policy import ModelInfo
from proxy.errors import InvalidRequest
from proxy.types import MessageView

log = logging.getLogger(__name__)

DEFAULT_ENCODING = "o200k_base"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_LOW_TOKENS = 85
IMAGE_HIGH_TOKENS = 765
AUDIO_BYTES_PER_SECOND = 16_000
AUDIO_TOKENS_PER_SECOND = 10
FILE_BYTES_PER_TOKEN = 8
FILE_REFERENCE_TOKENS = 1_000
TOOL_CALL_TOKENS = 3
TOOLS_BASE_TOKENS = 12
TOOL_FUNCTION_TOKENS = 7
APPROX_BYTES_PER_TOKEN = 4
# Texts longer than this are counted in pieces: tiktoken returns a list of every token, and
# building millions of Python ints holds the GIL, so counting a 24 MB message stalled the event
# loop for ~70 ms even from a worker thread. Pieces keep each hold to ~3 ms, and the
# transient list to a few MB instead of ~180.
COUNT_PIECE_CHARS = 1 << 18
# Texts counted again and again (a stored summary, weighed on each request of its conversation;
# an agent's tools, sent with every request): their counts are kept, bounded by texts and by the
# characters they hold.
KEPT_TEXTS = 4096
KEPT_TEXT_CHARS = 8 << 20
RUNNING = "running"  # the tag of the running sums carried beside a history's counts

Length = Callable[[str], int]


def lookup_model(model: str, table: Mapping[str, ModelInfo]) -> ModelInfo | None:
    """The first entry of ``table`` (glob -> ModelInfo) whose glob matches ``model``."""
    for pattern, info in table.items():
        if fnmatchcase(model, pattern):
            return info
    return None


def _exact(encoding: Any) -> Length:
    """Token counts from a tiktoken encoding; a long text counted piece by piece."""

    def length(text: str) -> int:
        if len(text) <= COUNT_PIECE_CHARS:
            return len(encoding.encode_ordinary(text))
        return sum(len(encoding.encode_ordinary(piece)) for piece in pieces(text))

    return length


def pieces(text: str, size: int = COUNT_PIECE_CHARS) -> Iterator[str]:
    """``text`` in pieces of at most ``size`` characters, each cut before a space that follows
    some other character: tiktoken's pre-tokenizer cuts there too (a word takes the space
    before it), so the pieces' counts add up to the whole text's; and no word is cut."""
    start, length = 0, len(text)
    while length - start > size:
        end = start + size
        floor = start + size // 2
        cut = text.rfind(" ", floor, end)
        while cut > floor and text[cut - 1].isspace():
            cut = text.rfind(" ", floor, cut)
        if cut <= floor:  # no such space: a hard cut, off by a token or two at most
            cut = end
        yield text[start:cut]
        start = cut
    yield text[start:]


def _approximate(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / APPROX_BYTES_PER_TOKEN)


class TokenCounter:
    """Counts messages per model; a message's count is cached per encoding with the rest of
    what is known about it (``facts``, a bounded LRU keyed by the message's exact content), so
    a long history is tokenized once, not on every request. ``with_facts`` gives a counter
    that looks messages up through one request's view of that cache."""

    def __init__(
        self,
        model_table: Mapping[str, ModelInfo] | None = None,
        *,
        cache_size: int = 16_384,
        load_encoding: Callable[[str], Any] = tiktoken.get_encoding,
        facts: FactCache | None = None,
    ) -> None:
        self._table = dict(model_table or {})
        self.facts = facts if facts is not None else FactCache(max_entries=cache_size)
        self._lookup: FactLookup = self.facts  # what counting scans: the cache or a request's view
        self._load_encoding = load_encoding
        self._lengths: dict[str, Length] = {}
        self._model_encoding: dict[str, str] = {}
        self._fallbacks: set[str] = set()  # encodings approximated (shared with request views)
        # How the last histories split into interactions, read on as they grow (the planner's).
        self.groupings = Groupings(self.facts.max_histories)
        # The planner's counts, their running sums, marks and the messages meeting a trigger's
        # conditions, of the last histories (``carried``): up to four lists each.
        self._history_values: Carried[int] = Carried(4 * self.facts.max_histories)
        # (encoding, a text or the JSON of a tools list) -> tokens (``count_again``, ``count_tools``)
        self.kept = KeptCounts(max_texts=KEPT_TEXTS, max_chars=KEPT_TEXT_CHARS)
        # The last request's tools (the object), their encoding and count: a request plans
        # them more than once (a parsed body never changes; views share this list).
        self._last_tools: list[tuple[object, str, int] | None] = [None]

    def with_facts(self, facts: FactLookup) -> TokenCounter:
        """This counter, looking messages up through ``facts`` (a request's view of
        ``self.facts``); encodings and their caches are shared, not copied."""
        if facts is self._lookup:
            return self
        view = object.__new__(type(self))  # copy.copy, without its detour through __reduce_ex__
        view.__dict__.update(self.__dict__)
        view._lookup = facts
        return view

    # --- encodings -----------------------------------------------------------------------------

    def encoding_name(self, model: str) -> str:
        """Model table glob first, then tiktoken's map, then o200k_base."""
        name = self._model_encoding.get(model)
        if name is None:
            info = lookup_model(model, self._table)
            if info is not None:
                name = info.encoding
            else:
                try:
                    name = tiktoken.encoding_name_for_model(model)
                except KeyError:
                    name = DEFAULT_ENCODING
            if len(self._model_encoding) > 1024:  # model names come from clients: stay bounded
                self._model_encoding.clear()
            self._model_encoding[model] = name
        return name

    def _length(self, encoding: str) -> Length:
        length = self._lengths.get(encoding)
        if length is None:
            try:
                length = _exact(self._load_encoding(encoding))
            except Exception as exc:  # any failure to load must degrade, never crash a request
                if not self._fallbacks:
                    log.warning(
                        "tiktoken encoding %r could not be loaded (%s); token counts are "
                        "approximate (%d bytes per token). Set TIKTOKEN_CACHE_DIR to a folder "
                        "holding tiktoken's files.",
                        encoding,
                        exc,
                        APPROX_BYTES_PER_TOKEN,
                    )
                self._fallbacks.add(encoding)
                length = _approximate
            self._lengths[encoding] = length
        return length

    def preload(self, models: Iterable[str] = ()) -> bool:
        """Load now the encodings of the model table, the default one and those of ``models``,
        so that no request pays for the file read (or download). Blocking: the app runs it in a
        thread at start-up. False when any fell back to the approximation (warned once)."""
        names = {info.encoding for info in self._table.values()} | {DEFAULT_ENCODING}
        names |= {self.encoding_name(model) for model in models}
        for name in sorted(names):
            self._length(name)
        return not self._fallbacks

    @property
    def approximate(self) -> bool:
        """True once any encoding fell back to the approximation."""
        return bool(self._fallbacks)

    # --- counting ------------------------------------------------------------------------------

    def count_text(self, text: str, model: str) -> int:
        return self._length(self.encoding_name(model))(text)

    def count_again(self, text: str, model: str) -> int:
        """``count_text`` of a text that is counted again on later requests (a conversation's
        stored summary): kept by its value, a string counting as any equal string does."""
        return self.count_encoded_again(text, self.encoding_name(model))

    def count_encoded_again(self, text: str, encoding: str) -> int:
        """``count_again`` for a model whose encoding (``encoding_name``) is known already."""
        return self.kept.get((encoding, text), len(text), lambda: self._length(encoding)(text))

    def count_encoded(self, text: str, encoding: str) -> int:
        """``count_text`` for a model whose encoding (``encoding_name``) is known already."""
        return self._length(encoding)(text)

    def count_message(self, message: MessageView, model: str) -> int:
        return self.per_message((message,), model)[0]

    def facts_of(self, messages: Sequence[MessageView]) -> list[Facts]:
        """What is known of each message, through this counter's view of the cache."""
        return self._lookup.scan(messages)

    def per_message(self, messages: Sequence[MessageView], model: str) -> list[int]:
        return self._counts(messages, self.encoding_name(model))

    def _counts(self, messages: Sequence[MessageView], encoding: str) -> list[int]:
        counts = []
        # Big requests are counted in worker threads (proxy.compaction.rewriter) while the event
        # loop counts others: losing a race on the cache only costs a recount (proxy.core.facts).
        for message, facts in zip(messages, self._lookup.scan(messages), strict=True):
            tokens = facts.tokens.get(encoding)
            if tokens is None:
                tokens = facts.tokens[encoding] = _message_tokens(message, self._length(encoding))
            counts.append(tokens)
        return counts

    @property
    def carried(self) -> Carried[int] | None:
        """Values per message of the last histories, read on as they grow (``proxy.core.carried``):
        through a request's view alone (``with_facts``), as a parsed body never changes and a
        caller's own list may."""
        return None if self._lookup is self.facts else self._history_values

    def history_counts(self, messages: Sequence[MessageView], model: str) -> list[int]:
        """``per_message`` of a conversation's history: only the messages past those the last
        history that began with the same message object held (the very objects) are looked
        up (``carried``); the rest are its counts, and their running sums (``Summed``: the
        planner sums spans of the history many times a request)."""
        encoding = self.encoding_name(model)
        carried = self.carried
        if carried is None or len(messages) < CARRY_FROM:
            return self._counts(messages, encoding)
        tags = (encoding, (encoding, RUNNING))  # the counts, and the sum through each message
        counts, running = carried.known_each(messages, tags)
        known = min(len(counts), len(running))  # dropped apart, at times
        del counts[known:], running[known:]
        if known < len(messages):
            added = self._counts(messages[known:], encoding)
            counts += added
            running += list(accumulate(added, initial=running[-1] if running else 0))[1:]
            carried.keep_each(messages, dict(zip(tags, (counts, running), strict=True)))
        return Summed(counts, [0, *running])

    def count_messages(self, messages: Sequence[MessageView], model: str) -> int:
        """What the prompt costs: every message plus the reply priming."""
        return sum(self.per_message(messages, model)) + REPLY_PRIMING

    def count_tools(self, tools: object, model: str) -> int:
        """Estimate of the ``tools`` schemas (see the module docstring); 0 without tools.
        Kept by the tools' JSON text: an agent sends the same tools on every request, tens of
        KB of schemas and descriptions, and each request plans them once or more."""
        if not isinstance(tools, list) or not tools:
            return 0
        encoding = self.encoding_name(model)
        request = self._lookup is not self.facts  # a parsed body's tools, never changed
        last = self._last_tools[0]
        if request and last is not None and last[0] is tools and last[1] == encoding:
            return last[2]
        key = _tools_key(tools)
        if key is None:
            return self._count_tools(tools, encoding)
        count = partial(self._count_tools, tools, encoding)
        tokens = self.kept.get((encoding, key), len(key[1]), count)
        if request:
            self._last_tools[0] = (tools, encoding, tokens)
        return tokens

    def _count_tools(self, tools: list[Any], encoding: str) -> int:
        length = self._length(encoding)
        total = TOOLS_BASE_TOKENS
        for tool in tools:
            spec = tool.get("function", tool) if isinstance(tool, dict) else {}
            if not isinstance(spec, dict):
                continue
            total += TOOL_FUNCTION_TOKENS + length(str(spec.get("name", "")))
            total += length(str(spec.get("description", "")))
            if spec.get("parameters") is not None:
                try:
                    schema = json.dumps(spec["parameters"], sort_keys=True)
                except RecursionError as exc:
                    raise InvalidRequest(
                        "a tool's parameters are nested too deeply", param="tools"
                    ) from exc
                total += length(schema)
        return total


def _tools_key(tools: list[Any]) -> tuple[str, bytes | str] | None:
    """The tools' exact JSON text: equal texts count alike. orjson's, unless it may have
    written a NaN as ``null`` (then, and for what orjson refuses, the standard library's, keys
    sorted as the schemas are counted); None when neither writes them (counted, not kept)."""
    try:
        raw = orjson.dumps(tools)
        if b"null" not in raw:
            return ("tools", raw)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        pass
    try:
        return ("text", json.dumps(tools, sort_keys=True))
    except (TypeError, ValueError, RecursionError):
        return None


def _message_tokens(message: MessageView, length: Length) -> int:
    tokens = TOKENS_PER_MESSAGE + length(str(message.get("role", "")))
    content = message.get("content")
    if isinstance(content, str):
        tokens += length(content)
    elif isinstance(content, list):
        tokens += sum(_part_tokens(part, length) for part in content if isinstance(part, dict))
    if isinstance(message.get("name"), str):
        tokens += length(message["name"]) + TOKENS_PER_NAME
    if isinstance(message.get("tool_call_id"), str):
        tokens += length(message["tool_call_id"])
    calls = [
        c.get("function") or c.get("custom")
        for c in message.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    calls.append(message.get("function_call"))
    for call in calls:
        if isinstance(call, dict):
            tokens += TOOL_CALL_TOKENS + length(str(call.get("name", "")))
            tokens += length(str(call.get("arguments", call.get("input", ""))))
    return tokens


def _part_tokens(part: Mapping[str, Any], length: Length) -> int:
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, dict) else None
        return IMAGE_LOW_TOKENS if detail == "low" else IMAGE_HIGH_TOKENS
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data", "") if isinstance(audio, dict) else ""
        seconds = len(str(data)) * 3 / 4 / AUDIO_BYTES_PER_SECOND
        return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)
    if kind == "file":
        file = part.get("file")
        if not isinstance(file, dict):
            file = {}
        data = str(file.get("file_data", ""))
        if not data:
            return FILE_REFERENCE_TOKENS
        return math.ceil(len(data) * 3 / 4 / FILE_BYTES_PER_TOKEN) + length(
            str(file.get("filename", ""))
        )
    text = part.get("text", part.get("refusal"))
    return length(text) if isinstance(text, str) else 0
