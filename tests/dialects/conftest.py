"""Fixtures shared with tests/core (the token counter) and tests/proxy (a mock provider and
proxies on free ports)."""

from tests.core.conftest import counter  # noqa: F401
from tests.proxy.conftest import mock, start_proxy  # noqa: F401
