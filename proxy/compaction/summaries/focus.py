"""``X-Compaction-Focus``: a one-off instruction for the summary made for one request,
as ``/compact <focus>`` does in coding agents: "keep the database migration details".

The value is one line of UTF-8 text of at most ``MAX_CHARS`` characters; anything else is a 400
(in the dialect's error shape) before anything is read, stored or forwarded. The focus reaches
the summarizer only when that request makes a summary (inline, after the answer ahead of time,
or an overflow rescue); it goes into the summarizer's user message, never its system message,
which stays the same bytes on every call. The checkpoint made records it (the admin API shows
it). Like every ``X-Compaction-*`` header it never reaches the provider.
"""

from __future__ import annotations

import unicodedata

from proxy.compaction.protocol import FOCUS, FOCUS_PARAM
from proxy.errors import InvalidRequest
from proxy.types import HeaderView

MAX_CHARS = 400


def asked_focus(headers: HeaderView) -> str | None:
    """The focus a request asks for, or None (absent or blank); InvalidRequest when the value
    is not one line of at most ``MAX_CHARS`` characters of UTF-8 text."""
    raw = headers.get(FOCUS)
    if raw is None:
        return None
    try:  # header values are read as latin-1: the client's bytes, as UTF-8
        value = raw.encode("latin-1").decode("utf-8").strip()
    except UnicodeError:
        raise _invalid("is not UTF-8 text") from None
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise _invalid("must be one line (no newlines or control characters)")
    if len(value) > MAX_CHARS:
        raise _invalid(f"is {len(value)} characters long; at most {MAX_CHARS} are allowed")
    return value or None


def _invalid(problem: str) -> InvalidRequest:
    return InvalidRequest(f"{FOCUS_PARAM} {problem}", param=FOCUS_PARAM, code="invalid_focus")
