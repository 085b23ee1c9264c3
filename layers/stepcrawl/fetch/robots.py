"""robots.txt per RFC 9309: fetched once per origin, cached with expiry, shared by waiters.

=========================  =========================================  ====================
robots.txt answer          rules                                      cached for
=========================  =========================================  ====================
2xx                        parsed (first 500 KiB; the rest ignored)   ``robots_ttl``
429, 5xx                   disallow all (the file is "unreachable")   ``robots_error_ttl``
any other status           allow all (the file is "unavailable")      ``robots_ttl``
redirects not followable   allow all (RFC 9309 2.3.1.2)               ``robots_ttl``
2xx body not decodable     allow all (no rule could be read)          ``robots_ttl``
no answer at all           none: the page's attempt fails with the    not cached
                           download's reason (``connect_error``, ...)
=========================  =========================================  ====================

429 counts as unreachable, not as a 4xx: a site that throttles its robots.txt is asking for
less traffic, which is what disallowing for a while gives it.

"No answer" is a host that does not answer HTTP at all: refused, reset, a DNS failure, a
timeout, TLS or protocol failure. RFC 9309 files network errors under "unreachable" too, but a
disallow-all cached for ``robots_error_ttl`` would hold every page of a dead host for minutes
when a retry with backoff settles it in seconds; the page's attempt fails instead, like any
transient error, and the next attempt asks again. Redirects that cannot be followed (too
many, a loop, no Location, a bad URL or one the network guard refuses) are an answer: the
server has no file we may read, which RFC 9309 treats as "unavailable".
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from protego import Protego

from stepcrawl.fetch.policy import FetchPolicy

__all__ = [
    "ROBOTS_MAX_BYTES",
    "ROBOTS_MAX_REDIRECTS",
    "Download",
    "RobotsAnswer",
    "RobotsCache",
    "RobotsKey",
    "RobotsRules",
    "rules_from_answer",
]

ROBOTS_MAX_BYTES = 500 * 1024
ROBOTS_MAX_REDIRECTS = 5

RobotsKey = tuple[str, str, int]
"""(scheme, host, port): robots.txt applies to exactly one origin."""

RobotsState = Literal["parsed", "allow_all", "unavailable", "no_answer"]

# Download reasons (status None) that still mean "the server answered": it redirected where we
# cannot follow, or sent a 2xx we cannot decode. Any other reason is a host that did not answer.
_ANSWERED_WITHOUT_FILE = frozenset(
    {
        "too_many_redirects",
        "redirect_loop",
        "redirect_no_location",
        "bad_url",
        "network_guard",
        "decode_error",
        "bad_encoding",
    }
)


@dataclass(frozen=True)
class RobotsAnswer:
    """How the download of a robots.txt ended: a final status and body, or no answer."""

    status: int | None
    body: bytes = b""
    reason: str = "ok"
    """Why there was no usable answer (a fetch reason), when there was none."""
    error: str = ""
    """What went wrong, for people (the exception's text), when there was no answer."""


Download = Callable[[str, FetchPolicy], Awaitable[RobotsAnswer]]
"""``(robots_url, policy) -> answer``; never raises for network trouble."""


@dataclass(frozen=True)
class RobotsRules:
    """The rules of one origin as cached."""

    state: RobotsState
    expires_at: float
    """On the cache's clock (monotonic seconds)."""
    parser: Protego | None = field(default=None, compare=False, repr=False)
    detail: str = ""
    """The answer: ``http_<status>``, or the download's fetch reason when there was none."""
    error: str = field(default="", compare=False)
    """For ``no_answer``: what went wrong, for people."""

    def can_fetch(self, url: str, user_agent: str) -> bool:
        """Whether ``user_agent`` may fetch ``url`` (a URL of this origin)."""
        if self.state in ("unavailable", "no_answer"):
            return False
        if self.parser is None:
            return True
        return self.parser.can_fetch(url, user_agent)

    def crawl_delay(self, user_agent: str) -> float | None:
        """Crawl-delay for ``user_agent`` in seconds, if the file sets one."""
        if self.parser is None:
            return None
        return self.parser.crawl_delay(user_agent)


def rules_from_answer(answer: RobotsAnswer, policy: FetchPolicy, now: float) -> RobotsRules:
    """Map a robots.txt download to rules, following the table above."""
    status = answer.status
    ok_until = now + policy.robots_ttl
    if status is None:
        if answer.reason in _ANSWERED_WITHOUT_FILE:
            return RobotsRules("allow_all", ok_until, detail=answer.reason)
        # expired at once: the next page fetch asks again
        return RobotsRules("no_answer", now, detail=answer.reason, error=answer.error)
    if 200 <= status < 300:
        text = answer.body.decode("utf-8", errors="replace")
        if len(answer.body) >= ROBOTS_MAX_BYTES:
            # a cut mid-line would leave half a rule
            text = text.rsplit("\n", 1)[0]
        return RobotsRules("parsed", ok_until, Protego.parse(text), detail=f"http_{status}")
    if status == 429 or 500 <= status < 600:
        return RobotsRules("unavailable", now + policy.robots_error_ttl, detail=f"http_{status}")
    return RobotsRules("allow_all", ok_until, detail=f"http_{status}")


class RobotsCache:
    """Rules per origin, at most ``max_entries`` (least recently used go first).

    Concurrent lookups of an origin not in the cache share one download. An entry's lifetime
    comes from the policy of the fetch that downloaded it.
    """

    def __init__(
        self,
        download: Download,
        *,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._download = download
        self._max_entries = max_entries
        self._clock = clock
        self._rules: OrderedDict[RobotsKey, RobotsRules] = OrderedDict()
        self._inflight: dict[RobotsKey, asyncio.Task[RobotsRules]] = {}
        self.downloads = 0
        """How many robots.txt downloads were started (for tests and metrics)."""

    def now(self) -> float:
        """The cache's clock."""
        return self._clock()

    async def rules(self, key: RobotsKey, policy: FetchPolicy) -> RobotsRules:
        """The rules of origin ``key``, downloading them if absent or expired.

        A ``no_answer`` is returned to the waiters of its download only; the next lookup
        downloads again.
        """
        cached = self._rules.get(key)
        if cached is not None and cached.expires_at > self._clock():
            self._rules.move_to_end(key)
            return cached
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._load(key, policy))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        # shielded: one waiter giving up (its own timeout) must not cancel the others' download
        return await asyncio.shield(task)

    def _forget(self, key: RobotsKey, task: asyncio.Task[RobotsRules]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]

    async def _load(self, key: RobotsKey, policy: FetchPolicy) -> RobotsRules:
        scheme, host, port = key
        default_port = {"http": 80, "https": 443}.get(scheme)
        netloc = f"[{host}]" if ":" in host else host
        if port != default_port:
            netloc = f"{netloc}:{port}"
        self.downloads += 1
        answer = await self._download(f"{scheme}://{netloc}/robots.txt", policy)
        rules = rules_from_answer(answer, policy, self._clock())
        self._rules[key] = rules
        self._rules.move_to_end(key)
        while len(self._rules) > self._max_entries:
            self._rules.popitem(last=False)
        return rules

    def peek(self, key: RobotsKey) -> RobotsRules | None:
        """The cached rules of ``key``, expired or not, without downloading."""
        return self._rules.get(key)

    def reset_inflight(self) -> None:
        """Drop in-flight downloads (they belong to an event loop that is gone)."""
        self._inflight.clear()

    def clear(self) -> None:
        """Forget every origin."""
        self._rules.clear()
        self._inflight.clear()
