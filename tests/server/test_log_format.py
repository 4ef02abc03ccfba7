"""The log lines' formatter writes what logging.Formatter writes, its time kept a second."""

from __future__ import annotations

import logging
import logging.config

from proxy.cli import logging_config
from proxy.server.log_format import PlainFormatter

FORMAT = logging_config("info")["formatters"]["plain"]["format"]


def record(created: float) -> logging.LogRecord:
    line = logging.LogRecord("proxy.access", logging.INFO, __file__, 1, '{"a":1}', None, None)
    line.created = created
    line.msecs = (created - int(created)) * 1000
    return line


def test_the_same_text_as_the_standard_formatter_within_and_across_seconds() -> None:
    ours, standard = PlainFormatter(FORMAT), logging.Formatter(FORMAT)
    for created in (1_700_000_000.001, 1_700_000_000.999, 1_700_000_001.5, 1_700_000_000.25):
        assert ours.format(record(created)) == standard.format(record(created))


def test_a_date_format_of_its_own_is_left_to_the_standard_formatter() -> None:
    ours = PlainFormatter(FORMAT, datefmt="%H:%M")
    standard = logging.Formatter(FORMAT, datefmt="%H:%M")
    assert ours.format(record(1_700_000_000.5)) == standard.format(record(1_700_000_000.5))


def test_the_served_log_config_uses_it() -> None:
    config = logging_config("info")
    made = logging.config.DictConfigurator(config).configure_formatter(
        config["formatters"]["plain"]
    )
    assert isinstance(made, PlainFormatter)
    assert made.format(record(1_700_000_000.5)) == logging.Formatter(FORMAT).format(
        record(1_700_000_000.5)
    )
