"""The official SDK clients the tests create (openai, anthropic) hold pooled connections. Each one
is closed when its test ends (the autouse fixture in tests/conftest.py): a client left to the
garbage collector leaves a socket whose ResourceWarning, an error in this suite, fires in
whichever later test the collector happens to run in."""

from __future__ import annotations

from typing import Any, TypeVar

Client = TypeVar("Client")

_open: list[Any] = []


def closed_after_test(client: Client) -> Client:
    """``client``, to be closed when the running test ends."""
    _open.append(client)
    return client


def close_all() -> None:
    while _open:
        _open.pop().close()
