"""The wire fixtures of tests/proxy (a mock provider and proxies on free ports)."""

from tests.proxy.conftest import mock, start_proxy  # noqa: F401
