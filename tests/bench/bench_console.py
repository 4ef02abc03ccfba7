"""Benchmark of the operator console: its pages with 10,000 conversations in Redis.

Run: ``.venv/bin/python -m tests.bench.bench_console [--conversations 10000]``.

Starts its own redis-server (a free port, a temp dir, stopped by its pid), writes one tenant's
conversations into it as the proxy stores them (a record of three checkpoints and a ledger entry
with a full timeline, ``proxy.compaction.money.books.MAX_TURNS`` points, each), and a second tenant's 100
as the baseline, then starts ``python -m proxy serve`` on that Redis, as its own process on
127.0.0.1. A page's load is what the browser asks of the proxy for it, one request after the
other on one kept-alive connection (the browser sends the files in parallel: this is the upper
bound): the console's files, then the page's data endpoints:

- the list page: ``/admin/ui/`` and its files, then ``GET /admin/conversations?limit=50`` (a
  page of the listing with each conversation's ledger), first and 150th page;
- a conversation's page: the files, then its record, ledger, timeline and what its summary
  replaced (a 404: this proxy keeps no originals yet).

It prints p50, p95 and max per page over ``--rounds`` loads, against the target (< 300 ms), and
the 10,000-conversation tenant's p50 over the 100-conversation one's: paging keeps a page's cost
independent of how many conversations a tenant has. With Chromium installed it also times the
pages in the browser: from navigation to the table or the chart drawn.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from proxy.compaction.money.books import MAX_TURNS, Turn, with_turn
from proxy.config.settings import Settings, parse_settings
from proxy.core.checkpoints import Checkpoint
from proxy.economics.ledger import Ledger
from proxy.ops.console.pages import static_files
from proxy.state.opening import open_store
from proxy.state.tenancy import Tenancy, credential_from_headers
from tests.support.config import ADMIN, TENANT_SECRET
from tests.support.processes import Server
from tests.support.redis_server import RedisServer, redis_available
from tests.support.servers import free_port, wait_for_port

BIG_KEY, SMALL_KEY = "sk-bench-big-tenant", "sk-bench-small-tenant"
PAGE = 50
TARGET_MS = 300.0
REPO = Path(__file__).resolve().parents[2]
TIKTOKEN_DIR = REPO.parent / "shared" / "tiktoken"


def settings_yaml(redis_url: str) -> str:
    return yaml.safe_dump(
        {
            "store": {"url": redis_url, "tenant_secret": TENANT_SECRET},
            "admin": {"token": ADMIN},
            "upstream": {"base_url": "http://127.0.0.1:9/v1"},  # never called
        }
    )


def tenant_of(settings: Settings, tenancy: Tenancy, key: str) -> str:
    headers = {"authorization": f"Bearer {key}"}
    return tenancy.tenant(credential_from_headers(headers, settings.conversation))


def messages(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    for i in range(n):
        out.append({"role": "user", "content": f"step {i}: read src/module_{i}.py and fix it"})
        out.append({"role": "assistant", "content": f"done with step {i}: " + "w" * 200})
    return out


def ledger_entry(conversation: int, checkpoint: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        **Ledger(
            requests=MAX_TURNS + conversation % 50,
            prompt_tokens=400_000,
            cached_tokens=120_000,
            output_tokens=9_000,
            summaries=3,
            spent=1.23,
            counterfactual=2.5,
            full_prompt_tokens=900_000,
        ).to_dict(),
        "at": time.time(),
        "model": "gpt-4o",
    }
    for t in range(MAX_TURNS):
        entry = with_turn(
            entry,
            Turn(
                at=time.time() - 60 * (MAX_TURNS - t),
                messages=20 + 4 * t,
                full_tokens=3_000 + 400 * t,
                sent_tokens=3_000 + 40 * (t % 25),
                billed_tokens=3_100 + 40 * (t % 25),
                cached_tokens=2_048 if t % 25 else 0,
                checkpoint=checkpoint if t >= 25 else None,
            ),
        )
    return entry


async def seed(settings: Settings, tenant: str, count: int, prefix: str) -> None:
    """``count`` conversations of ``tenant``, as the proxy stores them, 64 at a time, all in
    Redis (a patient store: on a busy machine the proxy's timeout would send some writes to its
    in-process fallback, where the proxy under test never sees them)."""
    patient = settings.store.model_copy(update={"operation_timeout_seconds": 30.0})
    store = open_store(patient)
    await store.start()
    history = messages(30)

    async def one(i: int) -> None:
        cid = f"{prefix}-{i:05d}"
        parent = None
        for covered in (21, 41, 57):
            cp = Checkpoint.create(
                history,
                covered=covered,
                summary="The agent fixed " + "s" * 1500,
                parent_id=parent,
                summary_tokens=400,
                model="gpt-4o-mini",
                dropped_messages=covered - 1,
                dropped_tokens=5_000,
            )
            assert await store.add_checkpoint(tenant, cid, cp)
            parent = cp.id
        assert await store.ledgers.update(tenant, cid, lambda _: ledger_entry(i, parent))

    for start in range(0, count, 64):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 64))))
    assert store.state().state == "ok", "the seeding lost Redis: figures would be wrong"
    await store.aclose()


class Timer:
    """Loads of one page, each the sum of its requests on one connection."""

    def __init__(self, client: httpx.Client, key: str) -> None:
        self.client = client
        self.headers = {
            "authorization": f"Bearer {ADMIN}",
            "x-caller-authorization": f"Bearer {key}",
        }
        self.files = [
            "/admin/ui/",
            *(f"/admin/ui/{n}" for n in static_files() if n != "index.html"),
        ]

    def load(self, data: list[str]) -> float:
        started = time.perf_counter()
        for path in self.files:
            assert self.client.get(path).status_code == 200, path
        for path in data:
            status = self.client.get(path, headers=self.headers).status_code
            assert status == 200 or path.endswith("/originals"), (path, status)
        return (time.perf_counter() - started) * 1000

    def cursors(self) -> list[str | None]:
        """Every page's cursor (None: the first), walking the whole listing."""
        found: list[str | None] = [None]
        listed = 0
        while True:
            cursor = found[-1]
            query = f"limit={PAGE}" + (f"&cursor={cursor}" if cursor else "")
            page = self.client.get(f"/admin/conversations?{query}", headers=self.headers).json()
            listed += len(page["data"])
            if page["next_cursor"] is None:
                self.listed = listed
                return found
            found.append(page["next_cursor"])


def conversation_paths(cid: str, checkpoint: str) -> list[str]:
    base = f"/admin/conversations/{cid}"
    return [
        base,
        f"{base}/ledger",
        f"{base}/timeline",
        f"{base}/checkpoints/{checkpoint}/originals",
    ]


def figures(name: str, times: list[float]) -> float:
    times = sorted(times)
    p50 = statistics.median(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    verdict = "ok" if p95 < TARGET_MS else "OVER TARGET"
    print(f"  {name:<44} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  max {times[-1]:6.1f} ms  {verdict}")
    return p50


def pages_of(timer: Timer, count: int) -> dict[str, list[str]]:
    """Each page's data endpoints for the tenant of ``timer``: the listing's first page and one
    three quarters in (when there is one), the newest conversation's page."""
    first = timer.client.get(f"/admin/conversations?limit={PAGE}", headers=timer.headers).json()
    cid = first["data"][0]["conversation_id"]
    record = timer.client.get(f"/admin/conversations/{cid}", headers=timer.headers).json()
    pages = {"list page, first": [f"/admin/conversations?limit={PAGE}"]}
    cursors = timer.cursors()
    assert timer.listed == count, f"{timer.listed} conversations listed, {count} stored"
    deep = len(cursors) * 3 // 4
    if deep > 1:
        cursor = cursors[deep - 1]
        pages[f"list page, {deep}th"] = [f"/admin/conversations?limit={PAGE}&cursor={cursor}"]
    pages["conversation page"] = conversation_paths(cid, record["current"])
    return pages


def measure(url: str, rounds: int, count: int) -> None:
    """Each page for both tenants, their loads interleaved so that the machine's noise falls
    on both alike; the big tenant's p50 over the baseline's."""
    with httpx.Client(base_url=url, timeout=30) as client:
        small, big = Timer(client, SMALL_KEY), Timer(client, BIG_KEY)
        small_pages, big_pages = pages_of(small, 100), pages_of(big, count)
        print("Over HTTP, one connection: the console's files, then the page's data endpoints")
        for name, data in big_pages.items():
            baseline = small_pages.get(name, small_pages["list page, first"])
            small.load(baseline), big.load(data)  # warm: the proxy's first call of each route
            times = [(small.load(baseline), big.load(data)) for _ in range(rounds)]
            p50 = figures(f"{name} ({count:,})", [b for _, b in times])
            ratio = p50 / statistics.median(a for a, _ in times)
            print(f"  {'':<44} p50 over the same page with 100 conversations: {ratio:.2f}")


def in_browser(url: str, rounds: int) -> None:
    from tests.ops.console.browser import chromium, why_not

    if why_not():
        print(f"browser: skipped ({why_not()})")
        return
    drawn = "performance.getEntriesByName('console-page-drawn')"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/admin/ui/")
        page.get_by_label("Admin token").fill(ADMIN)
        page.get_by_label("Tenant's API key").fill(BIG_KEY)
        page.get_by_role("button", name="Open the console").click()
        page.locator("table.listing tbody tr").first.wait_for()
        cid = page.locator("table.listing tbody th a").first.inner_text()
        pages = (("list page", "#/"), ("conversation page", f"#/c/{cid:s}"))
        print("In Chromium (big tenant), opened: from navigation start to the page drawn")
        for name, fragment in pages:
            times = []
            for _ in range(rounds + 1):  # the first load fills the browser's cache: not counted
                page.goto("about:blank")
                page.goto(f"{url}/admin/ui/{fragment}")
                page.wait_for_function(f"() => {drawn}.length > 0")
                times.append(page.evaluate(f"() => {drawn}[0].startTime"))
            figures(name, times[1:])
        print("In Chromium, reached from the other page (a link followed): to the page drawn")
        followed: dict[str, list[float]] = {name: [] for name, _ in pages}
        for _ in range(rounds):  # the page is the conversation's: the list first, then back
            for name, fragment in pages:
                page.evaluate(
                    "(to) => { performance.clearMarks(); performance.mark('go'); "
                    "location.hash = to; }",
                    fragment,
                )
                page.wait_for_function(f"() => {drawn}.length > 0")
                followed[name].append(
                    page.evaluate(f"() => {drawn}[0].startTime - "
                                  "performance.getEntriesByName('go')[0].startTime")
                )  # fmt: skip
        for name, times in followed.items():
            figures(name, times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    if not redis_available():
        raise SystemExit("redis-server is needed (apt-get install redis-server)")
    with RedisServer() as redis, tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        text = settings_yaml(redis.url)
        settings = parse_settings(text, environ={})
        tenancy = Tenancy.from_settings(settings.store)
        started = time.monotonic()
        asyncio.run(seed(settings, tenant_of(settings, tenancy, SMALL_KEY), 100, "small"))
        asyncio.run(
            seed(settings, tenant_of(settings, tenancy, BIG_KEY), args.conversations, "run")
        )
        print(
            f"seeded {args.conversations:,} + 100 conversations in {time.monotonic() - started:.0f} s"
        )
        config = Path(tmp) / "proxy.yaml"
        config.write_text(text)
        port = free_port()
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        if TIKTOKEN_DIR.is_dir():
            env["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_DIR)
        argv = [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
        ]
        server = Server("proxy", argv, log=Path(tmp) / "proxy.log", env=env, cwd=REPO)
        try:
            wait_for_port(port, timeout=30)
            url = f"http://127.0.0.1:{port}"
            load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
            print(f"{os.cpu_count()} cores, load average {load} (other work slows every figure)")
            measure(url, args.rounds, args.conversations)
            in_browser(url, max(5, args.rounds // 4))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
