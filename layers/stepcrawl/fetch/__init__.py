"""The fetch side of the crawler: pages over HTTP(S), politely and safely.

:class:`Fetcher` is the entry point (one per container); :class:`FetchPolicy` says what a fetch
may do and :class:`FetchResult` what happened, classified by :func:`classify` into ok /
transient / throttle / fatal for the retry logic. Every hop goes through the network guard
(:mod:`stepcrawl.fetch.guard`) and, when the policy says so, robots.txt
(:mod:`stepcrawl.fetch.robots`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Light (the standard library only), and imported now: the submodule ``classify`` would
# otherwise shadow the function of that name once anything imported it.
from stepcrawl.fetch.classify import OUTCOMES, Outcome, classify
from stepcrawl.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from stepcrawl.fetch.abort import FetchAbort
    from stepcrawl.fetch.client import Fetcher
    from stepcrawl.fetch.guard import NetworkGuard, blocked_category
    from stepcrawl.fetch.policy import DEFAULT_CONTENT_TYPES, FetchPolicy
    from stepcrawl.fetch.result import FetchResult
    from stepcrawl.fetch.robots import RobotsRules
    from stepcrawl.fetch.transport import TransportChoice, aiohttp_available

__all__ = [
    "DEFAULT_CONTENT_TYPES",
    "OUTCOMES",
    "FetchAbort",
    "FetchPolicy",
    "FetchResult",
    "Fetcher",
    "NetworkGuard",
    "Outcome",
    "RobotsRules",
    "TransportChoice",
    "aiohttp_available",
    "blocked_category",
    "classify",
]

#: Where each name lives: parse reads a sitemap with :mod:`.abort`, :mod:`.body` and
#: :mod:`.policy`, and must not load the HTTP client (httpx, aiohttp) on its way.
__getattr__ = lazy_exports(
    __name__,
    {
        "DEFAULT_CONTENT_TYPES": "policy",
        "FetchAbort": "abort",
        "FetchPolicy": "policy",
        "FetchResult": "result",
        "Fetcher": "client",
        "NetworkGuard": "guard",
        "RobotsRules": "robots",
        "TransportChoice": "transport",
        "aiohttp_available": "transport",
        "blocked_category": "guard",
    },
)
