"""``compaction-proxy check-config``: validate a config file and print the effective settings.

The settings go to stdout as JSON, secrets masked, so they stay parseable; what a reader should
know besides (the model windows in the order they are looked up, start-up warnings) goes to
stderr. ``load_checked`` is also how ``serve`` reads its file.
"""

from __future__ import annotations

import argparse
import json
import sys

from proxy.compaction.models.windows import startup_warnings, table_lines
from proxy.config.dump import masked_dump
from proxy.config.settings import Settings, load_settings
from proxy.state.opening import check_store_settings


def load_checked(path: str | None) -> Settings:
    """Settings from ``path``, plus the checks that need more than the schema (encryption keys,
    store URLs), so a bad key stops the start with a message rather than a traceback."""
    settings = load_settings(path)
    check_store_settings(settings.store)
    return settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file")


def command(args: argparse.Namespace) -> int:
    settings = load_checked(args.file)
    print(json.dumps(masked_dump(settings), indent=2))
    # The JSON above stays parseable on stdout; what a reader should know goes to stderr.
    discovery = (
        "then a window discovered from the provider's /models (for unknown models and those "
        "marked '/models first')"
        if settings.upstream.discover_windows
        else "(upstream.discover_windows is off)"
    )
    notes = [
        "model windows, first matching glob wins; at run time a window learned from an overflow "
        f"answer comes after config, {discovery}, then built-in:",
        *(f"  {line}" for line in table_lines(settings)),
        *(f"warning: {line}" for line in startup_warnings(settings)),
    ]
    print("\n".join(notes), file=sys.stderr)
    return 0
