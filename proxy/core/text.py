"""Text that JSON carries and UTF-8 does not: lone surrogates.

``"\\ud800"`` is valid JSON (some tokenizers and truncating editors produce one), and Python
reads it into a ``str`` that no UTF-8 encoder takes. Forwarded, it goes out as the same escape
(``proxy.wirejson``); anywhere the proxy writes text of its own that came from a client (what
the summarizer reads, a summary, a checkpoint's model label, a metric label) it is replaced, and
an operator's summary holding one is refused.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def well_formed(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, the replacement character."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def lone_surrogate(text: str) -> int | None:
    """Where the first lone surrogate of ``text`` is, or None."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()
