"""The console tests' servers: the billing provider, and a proxy in front of it with the admin
API behind the tests' token."""

from __future__ import annotations

import pytest

from tests.ops.console.scene import BillingProvider, console_settings
from tests.support.servers import ThreadedUvicorn


@pytest.fixture
def billing(mock) -> BillingProvider:
    """The scripted provider answering as ``mock``, billing as a caching provider would."""
    return BillingProvider(mock)


@pytest.fixture
def server(mock, billing: BillingProvider, start_proxy) -> ThreadedUvicorn:
    return start_proxy(console_settings(mock.url))
