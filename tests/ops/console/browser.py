"""Debian's Chromium under Playwright, as the console's tests and screenshots drive it.

Never ``playwright install``: the browser is the system package (``make test-tools`` installs
``chromium``); Playwright's own driver, from the ``playwright`` wheel, talks to it. Flags for a
root user on a machine without a display or network: headless, no sandbox (root), no GPU, no
background traffic. Each launch gets a fresh profile: Playwright passes Chromium a
``--user-data-dir`` in a new temporary folder (and refuses one in ``args``).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def why_not() -> str | None:
    """Why no browser can be driven here (None: it can)."""
    if not Path(CHROMIUM).is_file():
        return f"chromium not found at {CHROMIUM} (apt-get install chromium; make test does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[test]')"
    return None


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A launched Chromium (Playwright's ``Browser``) with a profile of its own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
