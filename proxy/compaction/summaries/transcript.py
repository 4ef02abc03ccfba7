"""What a summary reads: the turns as transcript lines, the newest of them within the cap, cut
into chunks of one summarizer call each, and the identifiers a summary must not lose.

Text work in proportion to the input (``proxy.compaction.summaries.summarizer`` runs it in a worker
thread). Old turns are hostile input: every line is escaped as the summarizer's
transcript; a lone surrogate becomes U+FFFD.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.messages import calls_text, content_text
from proxy.core.summary_message import escape_tags
from proxy.core.text import well_formed
from proxy.core.tokens import TokenCounter, pieces
from proxy.types import ChatMessage, MessageView

# What users complain a summary loses: kept verbatim when the model dropped them.
_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_IDENTIFIERS = (
    _URL,
    re.compile(r"(?<![\w/.])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]+"),  # paths with a slash
    re.compile(
        r"\b[\w-]+\.(?:py|js|ts|tsx|jsx|json|ya?ml|toml|md|txt|go|rs|java|c|h|cpp|hpp|rb|sh|sql|"
        r"html|css|csv|ini|cfg|lock|xml|pdf|log)\b"
    ),
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),  # UUID
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),  # hashes
    re.compile(r"\b[A-Z][A-Z0-9]+-\d+\b"),  # ticket ids: ABC-123
    re.compile(r"\b[A-Za-z][A-Za-z0-9]*[_-][\w-]*\d[\w-]*\b"),  # order_12345, build-42
    re.compile(r"(?<![\w.])\d+(?:[.,:]\d+)+(?![\w])|(?<![\w.])\d{3,}(?![\w])"),  # numbers
)
MAX_VERBATIM = 40
# A line is cut to this many characters per token it may still keep before it is counted, so
# that a 24 MB message is not tokenized whole to keep its last few hundred thousand tokens.
# Generous (text runs 3-5 characters a token): at worst a line keeps fewer tokens than it may.
_CHARS_PER_TOKEN_BOUND = 16
_SPLIT_LOOKBACK = 200  # characters searched back for whitespace to cut a line at
_IDENTIFIER_PIECE_CHARS = 1 << 16
_NOTICE_TOKENS = 64  # kept within max_summarized_tokens for the notice of what was left out


@dataclass(frozen=True)
class Source:
    """What one summary reads: the transcript's newest part, in chunks of one call each."""

    chunks: list[str]
    lines: list[str]  # the text read (for the identifier check)
    omitted_tokens: int = 0  # about how much of the oldest part was left out
    omitted_messages: int = 0  # messages left out whole or in part

    def notice(self) -> str:
        return omission_notice(self.omitted_messages, self.omitted_tokens)


def omission_notice(messages: int, tokens: int) -> str:
    """What the transcript and the summary say when the oldest part was left out."""
    return (
        f"[Left out of this summary: the oldest {messages} message(s) of these turns, about "
        f"{tokens} tokens, over the most one summary reads (summarizer.max_summarized_tokens).]"
    )


def read_newest(
    transcript: Sequence[ChatMessage],
    model: str,
    *,
    counter: TokenCounter,
    cap: int,
    budget: int,
) -> Source:
    """The newest ``cap`` tokens of ``transcript`` as lines, in chunks of ``budget`` tokens (one
    call each). Blocking, in proportion to the transcript: run it in a worker thread."""
    lines = [transcript_line(m) for m in transcript]
    kept, counts, omitted, omitted_chars = _newest(lines, model, counter, cap)
    source_lines = list(kept)
    omitted_tokens = 0
    if omitted:
        # An estimate from the part read: counting what is left out would cost what the cap
        # saves.
        omitted_tokens = max(1, omitted_chars * sum(counts) // max(1, sum(map(len, kept))))
        notice = omission_notice(omitted, omitted_tokens)
        kept.insert(0, notice)
        counts.insert(0, counter.count_text(notice, model))
    return Source(chunks(kept, counts, budget), source_lines, omitted_tokens, omitted)


def _newest(
    lines: list[str], model: str, counter: TokenCounter, cap: int
) -> tuple[list[str], list[int], int, int]:
    """(the newest lines within max_summarized_tokens, their token counts, how many lines
    and characters are left out): walking back from the newest, the line that does not fit
    is cut to its end, and every older one is left out."""
    left = cap - _NOTICE_TOKENS if cap > 2 * _NOTICE_TOKENS else cap
    kept: list[str] = []
    counts: list[int] = []
    index = len(lines)
    cut_chars = 0  # left out of the oldest line read
    while index > 0 and left > 0:
        index -= 1
        line = text = lines[index]
        if len(text) > left * _CHARS_PER_TOKEN_BOUND:
            text = tail(text, left * _CHARS_PER_TOKEN_BOUND)
        tokens = counter.count_text(text, model)
        for _ in range(4):  # each pass cuts in proportion to the excess
            if tokens <= left:
                break
            text = tail(text, len(text) * left // tokens)
            tokens = counter.count_text(text, model)
        tokens = min(left, tokens)
        kept.append(text)
        counts.append(tokens)
        left -= tokens
        if len(text) < len(line):  # its start is left out, and so is everything older
            cut_chars = len(line) - len(text)
            break
    kept.reverse()
    counts.reverse()
    omitted = index + (1 if cut_chars else 0)
    return kept, counts, omitted, cut_chars + sum(map(len, lines[:index]))


def tail(line: str, size: int) -> str:
    """The last ``size`` characters of ``line`` (at least one), from a whitespace when one is
    near, so that a cut line starts with a whole word."""
    size = max(1, min(size, len(line)))
    start = len(line) - size
    if start == 0:
        return line
    space = max(
        line.find(" ", start, start + _SPLIT_LOOKBACK),
        line.find("\n", start, start + _SPLIT_LOOKBACK),
    )
    return line[space + 1 :] if 0 <= space < len(line) - 1 else line[start:]


def chunks(lines: list[str], counts: list[int], budget: int) -> list[str]:
    """``lines`` in consecutive chunks of ``budget`` tokens, each filled before the next begins
    (a line is split where a chunk is full), so a transcript of T tokens takes ceil(T / budget)
    calls, and every line is read by some call."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for line, tokens in zip(lines, counts, strict=True):
        while tokens > budget - used and len(line) > 1:
            room = budget - used
            cut = len(line) * room // tokens
            if cut > 0:
                head = line[:cut]
                space = max(head.rfind(" ", -_SPLIT_LOOKBACK), head.rfind("\n", -_SPLIT_LOOKBACK))
                cut = space + 1 if space > 0 else cut
                current.append(line[:cut])
            chunks.append("\n".join(current))
            current, used = [], 0
            line, tokens = line[cut:], max(1, tokens - room)
        current.append(line)
        used += tokens
    if current or not chunks:
        chunks.append("\n".join(current))
    return chunks


def transcript_line(message: MessageView) -> str:
    """One message as a line of the transcript the summarizer reads (tags escaped)."""
    role = str(message.get("role", ""))
    label = f"{role} ({message['name']})" if isinstance(message.get("name"), str) else role
    parts = [content_text(message.get("content"))]
    content = message.get("content")
    if isinstance(content, list):
        parts += [
            f"[{p.get('type')}]"
            for p in content
            if isinstance(p, dict) and p.get("type") not in ("text", "refusal")
        ]
    calls = calls_text(message)
    if calls:
        parts.append(f"[calls] {calls}")
    # A lone surrogate becomes U+FFFD: the summarizer reads the rest of the message.
    return well_formed(escape_tags(f"{label}: " + "\n".join(p for p in parts if p)))


def quote(title: str, text: str, delim: str) -> str:
    # The previous summary is escaped too: it was written from the same untrusted turns.
    quoted = escape_tags(text).replace(delim, "[delimiter]")
    return f"{title}:\n<<<{delim}\n{quoted}\n{delim}>>>"


def identifiers(text: str) -> list[str]:
    """Paths, URLs, numbers and ids in ``text``, in order of first appearance, deduplicated."""
    found: dict[str, int] = {}
    offset = 0
    # Piece by piece, cut between words (no identifier holds a space): one regex search holds
    # the GIL until it finds a match, ~50 ms over megabytes without one.
    for piece in pieces(text, _IDENTIFIER_PIECE_CHARS):
        for pattern in _IDENTIFIERS:
            for match in pattern.finditer(piece):
                value = match.group(0).rstrip(".,;:")
                if value and value not in found:
                    found[value] = offset + match.start()
        offset += len(piece)
    # A path inside a URL (or a number inside a path) is covered by the longer identifier: one
    # that starts no later and ends no sooner. Spans, not substring tests of every pair: a
    # transcript may hold hundreds of thousands of identifiers.
    kept: list[str] = []
    reach = -1  # where the furthest-reaching identifier kept so far ends
    for value in sorted(found, key=lambda v: (found[v], -len(v))):
        end = found[value] + len(value)
        if end > reach:
            kept.append(value)
            reach = end
    return kept


def keep_identifiers(summary: str, sources: Sequence[str]) -> str:
    """Append the identifiers of ``sources`` that ``summary`` lost, as a short verbatim list."""
    missing = [i for i in identifiers("\n".join(sources)) if i not in summary]
    if not missing:
        return summary
    shown = missing[:MAX_VERBATIM]
    more = f"\n- (+{len(missing) - len(shown)} more)" if len(missing) > len(shown) else ""
    listed = "\n".join(f"- {i}" for i in shown)
    return f"{summary}\n\nKept verbatim from the summarized turns:\n{listed}{more}"
