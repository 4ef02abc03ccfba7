"""The operator console: pages the proxy serves at /admin/ui over the admin API."""
