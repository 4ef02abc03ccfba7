"""Screenshots of the operator console for the docs: ``python -m tests.ops.console.screenshots``.

Starts the scripted provider (billing as a caching provider would) and a proxy in front of it,
talks a few conversations through the official openai client, and photographs the console's two
pages at 1280 and 390 pixels wide into ``docs/console/``. Not a test: run it again when the pages
change, and commit the pictures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tests.ops.console.browser import chromium, why_not
from tests.ops.console.scene import TOOL_OUTPUT, BillingProvider, console_settings, talk
from tests.support.clients import KEY
from tests.support.config import ADMIN
from tests.support.proxies import running_mock, running_proxies
from tests.support.sdk_clients import close_all

OUT = Path(__file__).resolve().parents[3] / "docs" / "console"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}
# The conversations shown: (id, turns). The first is the one opened.
CONVERSATIONS = [
    ("agent-run-7f3e", 16),
    ("support/ticket-4821", 9),
    ("nightly-refactor", 12),
    ("docs-writer", 7),
    ("triage-bot-2", 10),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    problem = why_not()
    if problem:
        raise SystemExit(problem)
    args.out.mkdir(parents=True, exist_ok=True)
    with running_mock() as mock, running_proxies() as start:
        BillingProvider(mock)
        server = start(console_settings(mock.url))
        for conversation, turns in reversed(CONVERSATIONS):
            talk(server, conversation, turns, tool_output=TOOL_OUTPUT)
        close_all()
        opened = CONVERSATIONS[0][0]
        with chromium() as browser:
            for name, (width, height) in WIDTHS.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"{server.url}/admin/ui/")
                page.get_by_label("Admin token").fill(ADMIN)
                page.get_by_label("Tenant's API key").fill(KEY)
                page.get_by_role("button", name="Open the console").click()
                page.get_by_role("link", name=opened).wait_for()
                page.screenshot(path=args.out / f"conversations-{name}.png", full_page=True)
                page.get_by_role("link", name=opened).click()
                page.locator("svg.chart").wait_for()
                page.get_by_text("Loading…").wait_for(state="detached")  # what it replaced
                page.screenshot(path=args.out / f"conversation-{name}.png", full_page=True)
                page.close()
    for picture in sorted(args.out.glob("*.png")):
        print(picture)


if __name__ == "__main__":
    main()
