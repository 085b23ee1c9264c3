"""Shared test helpers: import them as ``tests.helpers.<module>`` (the repo root is on the path)."""
