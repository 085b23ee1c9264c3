"""A crawl task's own request headers, cookies and proxies, as the fetcher applies them.

The task's headers and its Cookie line go only to the task's own hosts (its
``allowed_domains``, the seeds' hosts by default): a robots.txt that redirects elsewhere must
not carry a session cookie or an API key along. They are laid over the fetcher's defaults
(User-Agent, Accept, Accept-Encoding) case-insensitively, so a task's ``Accept`` replaces the
default one; per-request headers (an incremental recrawl's conditional ones) go on top of
them in the fetcher (they never share a name: the pipeline refuses conditional and range
headers in a task's keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from stepcrawl.fetch.proxy import ProxyList
from stepcrawl.pipeline.request_options import ProxySettings, cookie_header

if TYPE_CHECKING:
    from stepcrawl.fetch.policy import FetchPolicy

__all__ = ["RequestOptions", "with_task_headers"]


@dataclass(frozen=True)
class RequestOptions:
    """Immutable and hashable, like the :class:`~stepcrawl.fetch.policy.FetchPolicy` it is
    part of. ``cookie`` is the Cookie header built from the task's cookies ("" for none)."""

    headers: tuple[tuple[str, str], ...] = ()
    cookie: str = ""
    proxy: ProxyList | None = None

    @classmethod
    def of(
        cls,
        headers: Mapping[str, str] | None = None,
        cookies: Mapping[str, str] | None = None,
        proxy: ProxySettings | None = None,
    ) -> RequestOptions:
        """The options of a crawl task's ``headers``, ``cookies`` and ``proxy`` keys."""
        return cls(
            headers=tuple((headers or {}).items()),
            cookie=cookie_header(cookies or {}),
            proxy=None if proxy is None else ProxyList(tuple(proxy.urls), proxy.secret),
        )


def with_task_headers(
    headers: Mapping[str, str], policy: FetchPolicy, host: str, *, page: bool
) -> httpx.Headers:
    """The headers of one request to ``host``: ``headers`` (the fetcher's own and the
    request's) with the task's laid over them, on the task's own hosts only.

    The task's keys never name a header the fetcher sets per request (conditional and range
    headers are refused by the pipeline's validation), so only the fetcher's defaults can be
    replaced: a task's Accept, on pages (robots.txt is text whatever the pages are).
    """
    merged = httpx.Headers(headers)
    options = policy.request
    if (options.headers or options.cookie) and policy.allows_host(host):
        for name, value in options.headers:
            if page or name.lower() != "accept":
                merged[name] = value
        if options.cookie:
            merged["Cookie"] = options.cookie
    return merged
