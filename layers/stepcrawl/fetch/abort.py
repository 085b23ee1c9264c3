"""The one exception that ends a fetch early; it carries the reason the result will report."""

from __future__ import annotations

__all__ = ["FetchAbort"]


class FetchAbort(Exception):  # noqa: N818 - not an error of the caller: a fetch outcome
    """Stop this fetch with ``reason`` (a key of the classification table) and a human detail."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
