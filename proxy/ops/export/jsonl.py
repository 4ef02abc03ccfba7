"""The JSONL sink: each new summary appended to a file as one JSON line."""

from __future__ import annotations

import asyncio
import os

from proxy.config.ops import JsonlExport
from proxy.errors import ExportError
from proxy.ops.export.events import SummaryEvent


class JsonlSink:
    """One JSON line per summary, appended with a single write (the file is opened for each, so
    a rotated file is picked up; several workers appending share it line by line)."""

    name = "jsonl"

    def __init__(self, settings: JsonlExport) -> None:
        self._path = settings.path

    async def deliver(self, event: SummaryEvent, body: bytes) -> None:
        try:
            await asyncio.to_thread(self._append, body + b"\n")
        except OSError as exc:
            raise ExportError(f"cannot append to the export file: {exc.strerror}") from exc

    def _append(self, line: bytes) -> None:
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    async def aclose(self) -> None:
        return None
