"""Reading a decoded answer as JSON: a whole body, or the data of SSE events (possibly a stream's
head and tail joined, where an event cut in two is skipped)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_EVENT_END = re.compile(rb"\r?\n\r?\n")


def json_objects(decoded: bytes) -> Iterator[dict[str, Any]]:
    """The answer as one JSON object, or each SSE event's data that decodes to an object."""
    try:
        whole = json.loads(decoded)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        yield whole
        return
    for event in _EVENT_END.split(decoded):
        data = b"\n".join(
            line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")
        )
        if not data:
            continue
        try:
            found = json.loads(data)
        except ValueError:
            continue
        if isinstance(found, dict):
            yield found
