"""The operator console (issue 22): pages the proxy serves at /admin/ui over the admin API."""
