"""Shared test set-up: tiktoken's files, closing the SDK clients each test made, and the real
servers most tests stand on: a mock provider, proxies in front of it, private redis-servers.

The folders mirror the package: tests/<axis>/ holds the tests of proxy/<axis>/ (core, config,
server, proxying, upstream, dialects, compaction, state, ops, tools), and tests of the top-level
modules (app, cli, wirejson) sit here. A test lives where the behaviour it checks lives, also
when it drives a real proxy: compaction end to end is in tests/compaction/. tests/support/ holds
what tests share and is no test (test modules import only from there). Separate commands keep
their own folders: tests/bench (make bench), tests/faults (its campaign: make soak),
tests/deploy, tests/e2e_real (make e2e-real).

tiktoken needs its BPE files. Verified copies sit beside the repo (``../shared/tiktoken``) on the
machines without internet; elsewhere (a fresh clone) tiktoken's own cache is used, downloading the
files once. Tests that need them take the ``tiktoken_files`` fixture, which skips only when
neither works, and the run's summary says how many were skipped that way.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.core.tokens import TokenCounter
from tests.support.config import config
from tests.support.mock_upstream import MockUpstream
from tests.support.paths import offline_folder
from tests.support.provider import Provider
from tests.support.proxies import running_mock, running_proxies
from tests.support.redis_server import RedisServer, own_redis_server
from tests.support.sdk_clients import close_all
from tests.support.servers import ThreadedUvicorn

ENCODINGS = ("o200k_base", "cl100k_base", "p50k_base", "r50k_base")
UNAVAILABLE = "tiktoken files unavailable"
LOAD_TIMEOUT = 120.0  # a download that hangs must not hang the suite
SKIPPED_KEY = pytest.StashKey[int]()


def tiktoken_cache() -> Path:
    """The folder tiktoken reads and fills, by its own rules (tiktoken/load.py)."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            return Path(os.environ[name])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def pytest_configure(config: pytest.Config) -> None:
    if offline_folder().is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(offline_folder())


def load_encodings() -> str | None:
    """Load every encoding once (downloading what the cache lacks): None, or why it failed."""
    outcome: list[str | None] = []

    def load() -> None:
        try:
            import tiktoken

            for name in ENCODINGS:
                tiktoken.get_encoding(name)
        except Exception as exc:  # no files and no internet, a bad download: all mean skip
            outcome.append(f"{type(exc).__name__}: {exc}")
        else:
            outcome.append(None)

    # In a thread: tiktoken downloads without a timeout.
    thread = threading.Thread(target=load, daemon=True, name="tiktoken-load")
    thread.start()
    thread.join(LOAD_TIMEOUT)
    return outcome[0] if outcome else f"loading took more than {LOAD_TIMEOUT:.0f}s"


@pytest.fixture(scope="session")
def tiktoken_cache_dir() -> Path:
    """The folder holding tiktoken's files, loaded once per session; skips when they cannot be
    had (pytest keeps the skip for the session: the load is not retried per test)."""
    problem = load_encodings()
    if problem is not None:
        pytest.skip(
            f"{UNAVAILABLE}: not in {offline_folder()} and not loadable into {tiktoken_cache()} "
            f"({problem[:200]})"
        )
    return tiktoken_cache()


@pytest.fixture
def tiktoken_files(tiktoken_cache_dir: Path) -> Path:
    """Skip (with the reason) when tiktoken's files can be neither found nor downloaded."""
    return tiktoken_cache_dir


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and UNAVAILABLE in str(report.longrepr[2])
    ]
    if skipped:
        terminalreporter.config.stash[SKIPPED_KEY] = len(skipped)


def pytest_unconfigure(config: pytest.Config) -> None:
    # Last, below pytest's own "N passed, M skipped" line, where nobody misses it.
    count = config.stash.get(SKIPPED_KEY, 0)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if count and reporter is not None:
        reporter.write_line(
            f"{UNAVAILABLE}: {count} tests skipped (put the files in {offline_folder()} "
            f"or let tiktoken download them into {tiktoken_cache()})",
            yellow=True,
            bold=True,
        )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    """Every client made with tests.support.sdk_clients.closed_after_test is closed when its test ends."""
    yield
    close_all()


@pytest.fixture(scope="session")
def counter(tiktoken_cache_dir: Path) -> TokenCounter:
    """A real tiktoken counter, shared so its cache is warm across tests."""
    return TokenCounter()


# --- real servers ------------------------------------------------------------------------------


@pytest.fixture
def mock() -> Iterator[MockUpstream]:
    """The mock provider, served for real; its base URL is ``mock.url``."""
    with running_mock() as upstream:
        yield upstream


@pytest.fixture
def second_mock() -> Iterator[MockUpstream]:
    """Another mock provider on a port of its own: the Anthropic API's upstream, or where a
    policy's own summarizer is sent."""
    with running_mock() as upstream:
        yield upstream


@pytest.fixture
def provider(mock: MockUpstream) -> Provider:
    """The scripted provider (summaries, tool calls, windows) answering as ``mock``."""
    return Provider(mock)


@pytest.fixture
def start_proxy() -> Iterator[Callable[..., ThreadedUvicorn]]:
    """start_proxy(settings) -> a running proxy (started as `serve` starts it), stopped at the
    end of the test."""
    with running_proxies() as start:
        yield start


@pytest.fixture
def proxy(mock: MockUpstream, start_proxy: Callable[..., ThreadedUvicorn]) -> ThreadedUvicorn:
    """A proxy with every default, in front of ``mock``."""
    return start_proxy(config(provider=mock.url))


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A private redis-server of the test's own, which it may kill and start again."""
    with own_redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def shared_redis() -> Iterator[RedisServer]:
    """One private redis-server for the whole test module (cheaper): never kill it."""
    with own_redis_server() as server:
        yield server


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The module's redis-server, emptied for this test."""
    import redis

    with redis.Redis.from_url(shared_redis.url) as client:
        client.flushdb()
    return shared_redis.url


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each store backend in turn: ``memory://``, then the module's emptied redis-server."""
    if request.param == "memory":
        return "memory://"
    return request.getfixturevalue("redis_url")
