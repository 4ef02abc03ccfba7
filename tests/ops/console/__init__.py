"""The operator console: its API, and its pages in a real browser."""
