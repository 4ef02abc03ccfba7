"""Trace one chat completions request through the proxy: how many of the proxy's modules it
enters, how many calls cross from one module into another and which pairs of modules call each
other both ways (the tangles a plain request walks through), and how often it switches between
the route (forwarding) and the compactor: in the order new frames are entered, and as calls from
one side into the other.

Run: .venv/bin/python -m tests.bench.trace_request [--source CHECKOUT]

The proxy's code comes from ``--source`` (default: this checkout), so one run can be compared
with an older commit (e.g. a ``git worktree``). The request is the plainest one: a chat completion with
a conversation id that needs no summary. It goes through the real app (its lifespan, the aiohttp
upstream client) to the mock provider served on a loopback port; ``sys.setprofile`` records every
new Python frame of the proxy's own code in this thread while the second of two identical
requests is served (the first warms caches).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The route's files before the split into proxying/ (older checkouts) and after it.
ROUTE = ("proxy/endpoints.py", "proxy/forward.py", "proxy/proxying/")
COMPACTION = ("proxy/compaction.py", "proxy/compaction/")


def side(path: str) -> str | None:
    if any(mark in path for mark in ROUTE):
        return "route"
    if any(mark in path for mark in COMPACTION):
        return "compaction"
    return None


def settings_from(yaml_text: str) -> object:
    for name in ("proxy.config.settings", "proxy.config"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "parse_settings"):
            return module.parse_settings(yaml_text, environ={})
    raise SystemExit("no parse_settings in this checkout")


@dataclass
class Trace:
    entered: set[str] = field(default_factory=set)  # the proxy's files a frame was entered in
    crossings: list[tuple[str, str, str]] = field(default_factory=list)  # route <-> compaction
    sides: list[str] = field(default_factory=list)  # the side of each new frame, in order
    # (caller's file, callee's file) of each call from one of the proxy's modules into another
    module_calls: list[tuple[str, str]] = field(default_factory=list)

    def two_way_pairs(self) -> list[tuple[str, str]]:
        """Pairs of modules each of which called the other during the request."""
        pairs = set(self.module_calls)
        return sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)


async def trace(upstream_url: str, source: Path) -> Trace:
    import httpx

    from proxy.app import create_app

    yaml_text = f"upstream:\n  base_url: {upstream_url}/v1\n"
    app = create_app(settings_from(yaml_text))
    root = str(source / "proxy")
    found = Trace()
    entered, crossings, sides = found.entered, found.crossings, found.sides
    prefix = len(root) - len("proxy")
    seen: list[object] = []  # frames kept alive so their ids are not reused

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(root):
            return
        if frame in seen:  # a coroutine resumed, not a new call
            return
        seen.append(frame)
        entered.add(path[prefix:])
        if side(path) is not None and (not sides or sides[-1] != side(path)):
            sides.append(side(path))  # type: ignore[arg-type]
        caller = frame.f_back
        if caller is None:
            return
        calling = caller.f_code.co_filename
        if calling.startswith(root) and calling != path:
            found.module_calls.append((calling[prefix:], path[prefix:]))
        here, there = side(path), side(caller.f_code.co_filename)
        if here and there and here != there:
            crossings.append((there, here, frame.f_code.co_qualname))

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": "Bearer sk-trace", "x-conversation-id": "trace-1"}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            warm = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert warm.status_code == 200, warm.text
            sys.setprofile(profile)
            try:
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
            finally:
                sys.setprofile(None)
            assert answer.status_code == 200, answer.text
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO, help="checkout whose proxy/ is traced")
    args = parser.parse_args(argv)
    source = args.source.resolve()
    sys.path.insert(0, str(source))
    for name in [m for m in sys.modules if m == "proxy" or m.startswith("proxy.")]:
        del sys.modules[name]
    import os

    for tiktoken in (REPO.parent / "shared" / "tiktoken", REPO.parents[1] / "shared" / "tiktoken"):
        if tiktoken.is_dir():  # the main checkout's sibling, or a worktree's under /work/wt
            os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tiktoken))
    from tests.support.mock_upstream import MockUpstream
    from tests.support.servers import ThreadedUvicorn

    with ThreadedUvicorn(MockUpstream()) as provider:
        found = asyncio.run(trace(provider.url, source))
    entered, crossings, sides = found.entered, found.crossings, found.sides
    print(f"proxy code from {source}")
    print(f"modules entered: {len(entered)}")
    for path in sorted(entered):
        print(f"  {path}")
    print(
        f"cross-module calls (caller in one module, callee in another): {len(found.module_calls)}"
    )
    pairs = found.two_way_pairs()
    print(f"pairs of modules that call each other both ways: {len(pairs)}")
    for a, b in pairs:
        print(f"  {a} <-> {b}")
    print(f"route <-> compaction switches, in the order frames were entered: {len(sides) - 1}")
    print("  " + " > ".join(sides))
    print(f"route <-> compaction calls (caller on one side, callee on the other): {len(crossings)}")
    for caller, callee, name in crossings:
        print(f"  {caller} -> {callee}: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
