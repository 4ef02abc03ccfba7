"""Recorded agent sessions as fixture files: small, and read back exactly.

An agent resends its whole history each turn, so the requests of a session repeat the same long
strings (the system prompt, tool schemas, file contents) forty times. A fixture stores every
string longer than ``SHARED`` once, in a table, and the requests refer to it by index; the whole
is gzipped JSON. ``load`` gives the requests back as they were recorded.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

SHARED = 120
_REF = "\u0000ref:"
FOLDER = Path(__file__).resolve().parent.parent / "fixtures" / "agents"


def _pack(value: Any, table: dict[str, int]) -> Any:
    if isinstance(value, str) and len(value) > SHARED:
        return _REF + str(table.setdefault(value, len(table)))
    if isinstance(value, dict):
        return {k: _pack(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [_pack(v, table) for v in value]
    return value


def _unpack(value: Any, strings: list[str]) -> Any:
    if isinstance(value, str) and value.startswith(_REF):
        return strings[int(value[len(_REF) :])]
    if isinstance(value, dict):
        return {k: _unpack(v, strings) for k, v in value.items()}
    if isinstance(value, list):
        return [_unpack(v, strings) for v in value]
    return value


def save(path: Path, session: dict[str, Any]) -> int:
    """Write ``session`` (``agent``, ``version``, ``policy``, ``requests``); the file's size."""
    table: dict[str, int] = {}
    packed = _pack(session, table)
    data = json.dumps({"strings": list(table), "session": packed}, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data.encode(), mtime=0))
    return path.stat().st_size


def load(path: Path) -> dict[str, Any]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    return _unpack(data["session"], data["strings"])
