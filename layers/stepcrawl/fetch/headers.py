"""The response headers a fetch keeps, and Retry-After parsing."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = ["KEPT_HEADERS", "kept_headers", "parse_retry_after"]

# What later stages use: parsing (type, encoding), revisits (validators, length), retries.
KEPT_HEADERS: tuple[str, ...] = (
    "content-type",
    "content-encoding",
    "retry-after",
    "last-modified",
    "etag",
    "content-length",
    "location",
)


def kept_headers(headers: httpx.Headers) -> dict[str, str]:
    """The :data:`KEPT_HEADERS` present in ``headers``; repeated ones joined by ``, ``."""
    return {name: headers[name] for name in KEPT_HEADERS if name in headers}


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or HTTP-date); None if absent.

    A date in the past gives 0; an unparseable value gives None (the caller then backs off on
    its own schedule rather than trusting garbage).
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        # not RFC 9110, but some servers send "1.5"; inf/nan would poison a scheduler
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # HTTP-dates are GMT by definition; a naive result means "-0000", still UTC
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max((when - current).total_seconds(), 0.0)
