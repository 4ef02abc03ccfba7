"""The ``prompt_cache_key`` the proxy puts first in a request it otherwise sends as the client
wrote it (``proxy.compaction.render.raw_with_cache_key``)."""

from __future__ import annotations

import re

DERIVED = re.compile(r"cpx-[0-9a-f]{32}")
_FIRST = re.compile(rb'\{"prompt_cache_key":"cpx-[0-9a-f]{32}",')


def without_key(received: bytes) -> bytes:
    """The bytes a provider received, without the key inserted first (which they must hold)."""
    found = _FIRST.match(received)
    assert found is not None, received[:80]
    return b"{" + received[found.end() :]
