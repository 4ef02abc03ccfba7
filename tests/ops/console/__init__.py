"""The operator console (issue 22): its API, and its pages in a real browser."""
