"""CPU work of a big request off the event loop.

Parsing, validation, planning and encoding are pure CPU: for a big body they run in a worker
thread, so that other clients' requests are not held up meanwhile. Below ``OFFLOAD_BYTES`` the
work takes a millisecond or two, less than handing it to a thread and back would cost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

OFFLOAD_BYTES = 1 << 20


def is_heavy(raw: bytes) -> bool:
    """Whether a request of this body is worked on off the event loop."""
    return len(raw) > OFFLOAD_BYTES


async def work(heavy: bool, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``, in a worker thread when the request is heavy, else right here."""
    if heavy:
        return await asyncio.to_thread(function, *args)
    return function(*args)
