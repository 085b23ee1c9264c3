"""Outcome of a fetch from its reason and status: the one table the retry logic reads.

Kept in one place so that a task can later override it (e.g. treat 404 as transient on a site
that serves 404 while it deploys) without touching the fetch code.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

__all__ = ["OUTCOMES", "REASON_OUTCOMES", "STATUS_OUTCOMES", "Outcome", "classify", "http_reason"]

Outcome = Literal["ok", "transient", "throttle", "fatal"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "transient", "throttle", "fatal")

# Reasons that are not an HTTP status. Everything the fetcher can report is listed here or is
# "http_<status>"; a test checks that no reason the code emits is missing.
REASON_OUTCOMES: Mapping[str, Outcome] = MappingProxyType(
    {
        "ok": "ok",
        # the network or the server blinked: the same request may well succeed later
        "timeout": "transient",
        "connect_error": "transient",
        "dns_error": "transient",
        "read_error": "transient",
        "protocol_error": "transient",
        "transport_error": "transient",
        # robots.txt answered 5xx or 429: RFC 9309 says disallow everything until it can be
        # read, which is a wait, not a verdict on the URL. (A robots.txt that got no answer at
        # all fails the page with the download's own reason: connect_error, timeout, ...)
        "robots_unavailable": "transient",
        # the proxy did not answer or refused the tunnel (fetch/proxy.py)
        "proxy_error": "transient",
        # the URL itself is unfit: retrying gives the same answer
        "tls_error": "fatal",
        "robots_disallowed": "fatal",
        "too_large": "fatal",
        "content_type": "fatal",
        "bad_encoding": "fatal",
        "decode_error": "fatal",
        "network_guard": "fatal",
        "off_domain": "fatal",
        "redirect_loop": "fatal",
        "too_many_redirects": "fatal",
        "redirect_no_location": "fatal",
        "bad_url": "fatal",
        # the proxy refused its credentials (407; the secret is read afresh for the next URL),
        # its secret cannot be read or holds no usable credentials, or the transport cannot
        # route through a proxy: every URL would get the same answer
        "proxy_auth": "fatal",
        "proxy_secret": "fatal",
        "proxy_unsupported": "fatal",
        # render: browser (fetch/browser.py): the page never got ready within render_timeout
        # (its wait_for never matched; a retry waits the same), no browser to render with
        # (what to install is in the detail), or the browser failed mid-page (it is replaced)
        "render_timeout": "fatal",
        "render_unavailable": "fatal",
        "render_error": "transient",
        # an exception the fetcher did not expect (a bug, or a case nobody foresaw): the URL
        # is recorded as failed with the exception in its detail instead of failing its batch
        "internal_error": "fatal",
    }
)

# Statuses whose outcome differs from their class's; 503 is throttle only with Retry-After.
STATUS_OUTCOMES: Mapping[int, Outcome] = MappingProxyType(
    {
        408: "transient",
        429: "throttle",
    }
)

_HTTP_PREFIX = "http_"


def http_reason(status: int) -> str:
    """The reason string of a response that ended the fetch with ``status``."""
    return f"{_HTTP_PREFIX}{status}"


def classify(reason: str, status: int | None = None, retry_after: float | None = None) -> Outcome:
    """``ok`` / ``transient`` / ``throttle`` / ``fatal`` for a fetch that ended with ``reason``.

    ``status`` is only read for ``http_<status>`` reasons: a 200 whose body was too large is
    ``too_large`` (fatal), not ok.
    """
    if reason in REASON_OUTCOMES:
        return REASON_OUTCOMES[reason]
    if not reason.startswith(_HTTP_PREFIX) or status is None:
        raise ValueError(f"unknown fetch reason: {reason!r}")
    if status in STATUS_OUTCOMES:
        return STATUS_OUTCOMES[status]
    if status == 503:
        return "throttle" if retry_after is not None else "transient"
    if 200 <= status < 300:
        return "ok"
    if 500 <= status < 600:
        return "transient"
    # other 4xx, and 1xx/3xx that reached the end of a fetch (304, 3xx without Location)
    return "fatal"
