"""The operator console in a real browser (Debian's Chromium under Playwright) against a real
proxy and the scripted provider: what an operator sees, what the actions change in the store,
and what the provider receives next."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ops.console.browser import chromium, why_not
from tests.ops.console.scene import OTHER_KEY, BillingProvider, talk
from tests.support.clients import KEY, admin_get
from tests.support.config import ADMIN
from tests.support.servers import ThreadedUvicorn

pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))
expect = pytest.importorskip("playwright.sync_api").expect  # assertions that wait for the page

CORRECTED = "CORRECTED BY THE OPERATOR: the user wants tabs, not spaces."


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, server: ThreadedUvicorn) -> Iterator[Any]:
    """A page of its own (a fresh context: no session of another test), 1280 pixels wide;
    every address it requests is kept in ``page.requested``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    opened.requested = []
    opened.on("request", lambda request: opened.requested.append(request.url))
    yield opened
    context.close()


def sign_in(page: Any, server: ThreadedUvicorn, *, token: str = ADMIN, key: str = KEY) -> None:
    page.goto(f"{server.url}/admin/ui/")
    page.get_by_label("Admin token").fill(token)
    page.get_by_label("Tenant's API key").fill(key)
    page.get_by_role("button", name="Open the console").click()


def listed(page: Any) -> list[str]:
    """The conversation ids of the list page, in its order."""
    page.get_by_role("heading", name="Conversations").wait_for()
    return page.locator("table.listing tbody th a").all_inner_texts()


def record(server: ThreadedUvicorn, conversation: str, key: str = KEY) -> dict[str, Any]:
    shown = admin_get(server, f"/conversations/{conversation}", key=key)
    assert shown.status_code == 200, shown.text
    return shown.json()


def confirm(page: Any, action: str) -> None:
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_role("button", name=action, exact=True).click()
    dialog.wait_for(state="hidden")


def received_since(mock, start: int) -> str:
    """Everything the provider received for chat completions after its ``start``-th request."""
    return json.dumps([r.json() for r in mock.chat_requests()[start:]])


def test_a_tenant_sees_its_own_conversations_newest_first_and_opens_one(
    page: Any, server: ThreadedUvicorn, browser: Any
) -> None:
    talk(server, "conv-old", 4)
    talk(server, "conv-new", 7)
    talk(server, "conv-other", 4, key=OTHER_KEY)

    sign_in(page, server)
    assert listed(page) == ["conv-new", "conv-old"]  # newest first, none of the other tenant
    ledger = admin_get(server, "/conversations/conv-new/ledger").json()["ledger"]
    row = page.locator("table.listing tbody tr").first
    assert row.locator("[data-label=Requests]").inner_text() == str(ledger["requests"])
    assert row.locator("[data-label='Tokens sent']").inner_text() == f"{ledger['prompt_tokens']:,}"

    page.get_by_role("link", name="conv-new").click()
    page.get_by_role("heading", name="conv-new", exact=True).wait_for()
    shown = record(server, "conv-new")
    current = next(c for c in shown["checkpoints"] if c["id"] == shown["current"])
    assert page.locator("pre.summary").inner_text() == current["summary"]
    assert page.get_by_role("heading", name=f"Checkpoint {current['id']} (current)").is_visible()
    # What it replaced: the originals the proxy keeps for recall, by handle.
    kept = admin_get(server, "/conversations/conv-new/originals").json()["data"]
    replaced = page.locator(".panel", has_text="What it replaced")
    expect(replaced).to_contain_text(kept[0]["handle"])
    expect(replaced).to_contain_text("conv-new, step 0")
    # The timeline: a point per answered request, a marker where each summary started to apply.
    turns = admin_get(server, "/conversations/conv-new/timeline").json()["turns"]
    assert len(turns) == ledger["requests"] > 7
    assert page.locator("svg.chart circle.dot").count() == len(turns)
    applied = [t["checkpoint"] for t in turns]
    landed = sum(1 for i, c in enumerate(applied) if c and (i == 0 or applied[i - 1] != c))
    assert landed >= 2 and page.locator("svg.chart .landing").count() == landed
    page.get_by_text("The timeline as a table").click()
    cells = page.locator("table.turns tbody tr").first.locator("td").all_inner_texts()
    assert cells[2] == f"{turns[0]['sent_tokens']:,}"
    assert page.locator("table.checkpoints tbody tr").count() == len(shown["checkpoints"])

    # Another tenant's conversation, named in the address: nothing of it.
    page.goto(f"{server.url}/admin/ui/#/c/conv-other")
    page.get_by_text("No such conversation for this tenant.").wait_for()
    assert page.locator("pre.summary").count() == 0

    other = browser.new_context().new_page()
    sign_in(other, server, key=OTHER_KEY)
    assert listed(other) == ["conv-other"]
    other.context.close()


def test_edit_restore_and_forget_change_what_the_provider_receives(
    page: Any, server: ThreadedUvicorn, mock, billing: BillingProvider
) -> None:
    history = talk(server, "conv-a", 7)
    before = record(server, "conv-a")
    older = before["checkpoints"][-1]  # the first summary
    assert len(before["checkpoints"]) >= 2 and older["id"] != before["current"]
    sign_in(page, server)
    page.get_by_role("link", name="conv-a").click()

    # Edit: cancelled first (nothing changes), then confirmed.
    edit = page.get_by_role("button", name="Edit summary")
    assert edit.get_attribute("aria-expanded") == "false"
    edit.click()
    assert edit.get_attribute("aria-expanded") == "true"
    page.get_by_label("Corrected summary").fill(CORRECTED)
    page.get_by_role("button", name="Save correction…").click()
    confirm(page, "Cancel")
    assert record(server, "conv-a") == before
    page.get_by_role("button", name="Save correction…").click()
    confirm(page, "Save correction")
    page.get_by_text("Summary corrected").wait_for()
    expect(page.locator("pre.summary")).to_have_text(CORRECTED)
    start = len(mock.chat_requests())
    talk(server, "conv-a", 1, history=history)
    assert CORRECTED in received_since(mock, start)
    assert CORRECTED in billing.chat_requests()[-1]["messages"][1]["content"]

    # Restore the first summary: the correction is set aside, the first one is sent again.
    page.get_by_role("button", name=f"Restore checkpoint {older['id']}").click()
    confirm(page, "Restore")
    page.get_by_text(f"Checkpoint {older['id']} is current again.").wait_for()
    assert record(server, "conv-a")["current"] == older["id"]
    start = len(mock.chat_requests())
    talk(server, "conv-a", 1, history=history)
    sent = received_since(mock, start)
    assert older["summary"].splitlines()[0] in sent and CORRECTED not in sent

    # Forget: gone from the list and from the store.
    page.get_by_role("button", name="Forget this conversation…").click()
    confirm(page, "Forget")
    page.get_by_text("Conversation conv-a forgotten.").wait_for()
    page.get_by_text("No conversation of this tenant is listed yet").wait_for()
    assert admin_get(server, "/conversations/conv-a").status_code == 404
    assert admin_get(server, "/conversations/conv-a/timeline").json()["turns"] == []

    # The credentials never travelled in an address, and the page's own address holds none.
    assert page.requested and not [u for u in page.requested if ADMIN in u or KEY in u]
    assert ADMIN not in page.url and KEY not in page.url


def test_a_wrong_token_sees_nothing(page: Any, server: ThreadedUvicorn) -> None:
    talk(server, "conv-a", 4)
    sign_in(page, server, token="not-the-admin-token")
    page.get_by_role("alert").filter(has_text="The admin token was refused.").wait_for()
    assert page.locator("table").count() == 0 and "conv-a" not in page.content()
    assert page.evaluate("sessionStorage.length") == 0

    # A kept session whose token no longer works (rotated): back to signing in, nothing shown.
    page.evaluate(
        "sessionStorage.setItem('compaction-proxy-console', JSON.stringify({token: 'old', key: "
        f"'{KEY}'}}))"
    )
    page.goto(f"{server.url}/admin/ui/#/c/conv-a")
    page.get_by_role("alert").filter(has_text="The admin token was refused.").wait_for()
    assert "conv-a" not in page.locator("main").inner_text()
    assert page.evaluate("sessionStorage.length") == 0


def test_by_keyboard_on_a_390_pixel_screen(page: Any, server: ThreadedUvicorn) -> None:
    talk(server, "conv-a", 4)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server.url}/admin/ui/")
    page.get_by_label("Admin token").wait_for()
    page.keyboard.type(ADMIN)  # the token field has the focus
    page.keyboard.press("Tab")
    page.keyboard.type(KEY)
    page.keyboard.press("Enter")
    assert listed(page) == ["conv-a"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    page.keyboard.press("Tab")  # from the page's heading (focused) to its first link
    assert page.evaluate("document.activeElement.textContent") == "conv-a"
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="conv-a", exact=True).wait_for()
    page.locator("svg.chart").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    # Forget, then change one's mind: Escape closes the dialog and nothing is deleted.
    page.get_by_role("button", name="Forget this conversation…").focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    assert page.evaluate("document.activeElement.textContent") == "Cancel"
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert admin_get(server, "/conversations/conv-a").status_code == 200
