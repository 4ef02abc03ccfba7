"""The log lines' formatter: ``logging.Formatter``'s text, its time written once a second.

Every proxied request writes an access line (proxy/server/access_log.py), and the default
``formatTime`` converts and formats the local time for each one (``time.localtime`` and
``strftime``: about a sixth of what a line costs). Within one second that text does not change,
so it is kept and only the milliseconds are added.
"""

from __future__ import annotations

import logging
import time


class PlainFormatter(logging.Formatter):
    """``logging.Formatter``, the same text: the default ``%(asctime)s`` (no ``datefmt``)
    reuses the date and time of the last line when it was written in the same second."""

    _second: tuple[int, str] = (-1, "")  # (whole second, its date and time), one attribute

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        known = self._second
        if known[0] != second:
            text = time.strftime(self.default_time_format, time.localtime(second))
            known = self._second = (second, text)
        if self.default_msec_format:
            return self.default_msec_format % (known[1], record.msecs)
        return known[1]
