"""The fetch side of the crawler: pages over HTTP(S), politely and safely.

:class:`Fetcher` is the entry point (one per container); :class:`FetchPolicy` says what a fetch
may do and :class:`FetchResult` what happened, classified by :func:`classify` into ok /
transient / throttle / fatal for the retry logic. Every hop goes through the network guard
(:mod:`stepcrawl.fetch.guard`) and, when the policy says so, robots.txt
(:mod:`stepcrawl.fetch.robots`).
"""

from __future__ import annotations

from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.classify import OUTCOMES, Outcome, classify
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
