"""The fetcher: one shared HTTP client per container, every hop checked, bodies capped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urljoin, urlsplit

import httpx

from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.body import ACCEPT_ENCODING, CappedBody
from stepcrawl.fetch.classify import classify, http_reason
from stepcrawl.fetch.guard import NetworkGuard
from stepcrawl.fetch.headers import kept_headers, parse_retry_after
from stepcrawl.fetch.pinning import pinned
from stepcrawl.fetch.policy import FetchPolicy
from stepcrawl.fetch.proxy import ProxyRouter, SecretReader, redact_userinfo, routed
from stepcrawl.fetch.request_options import with_task_headers
from stepcrawl.fetch.result import Exchange, FetchResult
from stepcrawl.fetch.robots import (
    ROBOTS_MAX_BYTES,
    ROBOTS_MAX_REDIRECTS,
    RobotsAnswer,
    RobotsCache,
    RobotsKey,
    RobotsRules,
)
from stepcrawl.fetch.transport import (
    TRANSPORT_ERRORS,
    TransportChoice,
    TransportName,
    UnusableLocation,
    build_client,
    error_reason,
)

__all__ = ["Fetcher"]

logger = logging.getLogger("stepcrawl.fetch")

_SCHEMES = {"http": 80, "https": 443}
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_MAX_DETAIL = 300
_DRAIN_MAX = 64 * 1024
# raw_host is IDNA-encoded: letters, digits, hyphens, dots; underscores occur in the wild;
# colons (and a zone after "%") only in IPv6 literals
_HOST_CHARS = re.compile(rb"[a-z0-9_.\-]+|[0-9a-f:.]+(%[a-z0-9]+)?", re.IGNORECASE)


@dataclass
class _Trace:
    """What is known so far about one fetch, so an early stop still reports it."""

    url: str
    final_url: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    redirects: list[str] = field(default_factory=list)
    exchange: Exchange | None = None  # the last hop's request and response head


def _parse_url(url: str | httpx.URL) -> httpx.URL:
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchAbort("bad_url", f"{url!r}: {exc}") from exc
    if parsed.scheme not in _SCHEMES:
        raise FetchAbort("bad_url", f"{url!r}: scheme must be http or https")
    if not parsed.raw_host:
        raise FetchAbort("bad_url", f"{url!r}: no host")
    if not _HOST_CHARS.fullmatch(parsed.raw_host):
        # caught here rather than by a resolver that would send the garbage out as a query
        raise FetchAbort("bad_url", f"{url!r}: invalid host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        # httpx accepts any number; the socket layer then raises OverflowError, not OSError
        raise FetchAbort("bad_url", f"{url!r}: port out of range")
    return parsed


def _lenient_host(url: str, base: str = "") -> str:
    """The host of a URL httpx refused (relative to ``base``), as far as the standard library
    can tell; or ""."""
    try:
        return urlsplit(urljoin(base, url)).hostname or ""
    except ValueError:
        return ""


def _host(url: httpx.URL) -> str:
    return url.raw_host.decode("ascii").lower()


def _port(url: httpx.URL) -> int:
    return url.port or _SCHEMES[url.scheme]


def _loop_key(url: httpx.URL) -> str:
    # fragments never reach the server: /a#x -> /a#y is the same request again
    return str(url.copy_with(fragment=None))


class Fetcher:
    """Fetches pages for a crawl; one per container, reused across invocations.

    The HTTP client is created on first use and bound to the running event loop. A Lambda
    handler that keeps one loop (``loop.run_until_complete``) keeps its connections and robots
    cache between invocations; under a new loop (each ``asyncio.run``) the client is rebuilt
    and only the robots cache survives.
    """

    def __init__(
        self,
        *,
        transport: TransportChoice = "auto",
        guard: NetworkGuard | None = None,
        robots_cache_size: int = 10_000,
        secrets: SecretReader | None = None,
    ) -> None:
        self._choice: TransportChoice = transport
        self._guard = guard or NetworkGuard()
        # proxies of the policies' tasks; ``secrets`` reads their credentials (fetch/proxy.py)
        self._proxies = ProxyRouter(self._guard, secrets)
        self._http: httpx.AsyncClient | None = None
        self._transport_name: TransportName | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.robots_cache = RobotsCache(self._download_robots, max_entries=robots_cache_size)

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def transport_name(self) -> TransportName | None:
        """``aiohttp`` or ``httpx`` once the client exists, else None."""
        return self._transport_name

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            # A client from a previous loop cannot be closed from this one; dropping it lets
            # its sockets be collected with the dead loop.
            self._http, self._transport_name = build_client(self._choice, self._guard)
            self._loop = loop
            self.robots_cache.reset_inflight()
        return self._http

    async def aclose(self) -> None:
        """Close the shared client (a later fetch opens a new one)."""
        client, loop = self._http, self._loop
        self._http = self._loop = None
        # a client of a loop that is gone cannot be closed from this one; it is only dropped
        if client is not None and loop is asyncio.get_running_loop():
            await client.aclose()

    # ------------------------------------------------------------------------ public fetches

    async def fetch(
        self, url: str, policy: FetchPolicy, *, headers: Mapping[str, str] | None = None
    ) -> FetchResult:
        """Fetch one URL under ``policy``; a result whatever happens, within the total timeout.

        ``headers`` are added to this URL's requests (an incremental crawl's conditional
        headers, crawl/incremental.py).

        Only cancellation propagates: any other exception, a bug included, becomes this URL's
        result (``internal_error``), so that one URL can never fail a whole batch.
        """
        started = time.perf_counter()
        trace = _Trace(url=url, final_url=url)
        body = b""
        reason = "ok"
        detail = ""
        try:
            async with asyncio.timeout(policy.total_timeout):
                body, reason = await self._fetch_page(url, policy, trace, headers)
        except FetchAbort as exc:
            reason, detail = exc.reason, exc.detail
        except TRANSPORT_ERRORS as exc:
            reason, detail = error_reason(exc), f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug must end this URL, not its batch (docstring)
            logger.exception("fetch of %s failed unexpectedly", url)
            body, reason, detail = b"", "internal_error", f"{type(exc).__name__}: {exc}"
        detail = redact_userinfo(detail)  # no URL's user:password in a failure's text
        if len(detail) > _MAX_DETAIL:
            detail = detail[:_MAX_DETAIL] + "..."  # some errors quote the whole response
        retry_after: float | None = None
        if trace.status in _RETRY_AFTER_STATUSES and reason == http_reason(trace.status or 0):
            retry_after = parse_retry_after(trace.headers.get("retry-after"))
        elif reason == "robots_unavailable":
            retry_after = self._robots_retry_after(trace.final_url)
        return FetchResult(
            url=url,
            final_url=trace.final_url,
            status=trace.status,
            headers=trace.headers,
            body=body,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            redirects=trace.redirects,
            outcome=classify(reason, trace.status, retry_after),
            reason=reason,
            retry_after=retry_after,
            detail=detail,
            exchange=trace.exchange,
        )

    async def fetch_many(
        self,
        urls: Sequence[str],
        policy: FetchPolicy,
        concurrency: int = 16,
        *,
        headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FetchResult]:
        """Fetch ``urls`` with at most ``concurrency`` in flight; results in input order.
        ``headers``: extra request headers by URL (see :meth:`fetch`)."""
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        gate = asyncio.Semaphore(concurrency)

        async def one(url: str) -> FetchResult:
            async with gate:
                return await self.fetch(url, policy, headers=(headers or {}).get(url))

        return list(await asyncio.gather(*(one(u) for u in urls)))

    async def robots(self, url: str, policy: FetchPolicy) -> RobotsRules:
        """The robots.txt rules that govern ``url`` (cached per origin)."""
        return await self.robots_cache.rules(_robots_key(_parse_url(url)), policy)

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        """The Crawl-delay robots.txt sets for ``policy.user_agent`` on ``url``'s origin.

        None when there is none to know, never an exception: the crawl stage asks this for
        the URLs it just fetched, bad ones included. An origin whose robots.txt had no answer
        is not asked again here (that would double the wait on a dead host); its next page
        fetch asks, and the delay is learned then.
        """
        try:
            key = _robots_key(_parse_url(url))
        except FetchAbort:
            return None
        known = self.robots_cache.peek(key)
        if known is not None and known.state == "no_answer":
            return None
        rules = await self.robots_cache.rules(key, policy)
        return rules.crawl_delay(policy.user_agent)

    # ------------------------------------------------------------------------------ internals

    async def _fetch_page(
        self,
        url: str,
        policy: FetchPolicy,
        trace: _Trace,
        extra_headers: Mapping[str, str] | None = None,
    ) -> tuple[bytes, str]:
        response = await self._open(
            url,
            policy,
            trace,
            max_redirects=policy.max_redirects,
            page=True,
            extra_headers=extra_headers,
        )
        try:
            status = response.status_code
            if not 200 <= status < 300:
                await _release(response)
                return b"", http_reason(status)
            if status == 204:
                return b"", "ok"
            content_type = response.headers.get("content-type")
            if not policy.allows_content_type(content_type):
                raise FetchAbort("content_type", content_type or "no Content-Type")
            body = CappedBody(
                response.headers.get("content-encoding"),
                max_bytes=policy.max_bytes,
                wire_cap=policy.wire_cap,
            )
            _check_declared_length(response, policy)
            async for raw in response.aiter_raw():
                body.feed(raw)
            return body.finish(), "ok"
        finally:
            await response.aclose()

    async def _open(
        self,
        url: str,
        policy: FetchPolicy,
        trace: _Trace,
        *,
        max_redirects: int,
        page: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send GETs, following redirects by hand, until a non-redirect response (left open).

        A page hop must be on an allowed domain and allowed by robots.txt; every hop must pass
        the network guard.
        """
        client = self._client()
        current = self._parse_hop(url, policy)
        seen = {_loop_key(current)}
        timeout = httpx.Timeout(
            connect=policy.connect_timeout,
            read=policy.read_timeout,
            write=policy.read_timeout,
            pool=policy.connect_timeout,
        )
        headers = {
            "User-Agent": policy.user_agent,
            "Accept": policy.accept_header if page else "text/plain, */*",
            "Accept-Encoding": ACCEPT_ENCODING,
            **(extra_headers or {}),
        }
        while True:
            host = _host(current)
            if page and not policy.allows_host(host):
                raise FetchAbort("off_domain", f"{host} is not in allowed_domains")
            # before robots.txt: nothing at all may be sent to an address the guard refuses
            addresses = await self._guard.check(
                host, _port(current), allow_private=policy.allow_private_network
            )
            if page and policy.obey_robots:
                await self._check_robots(current, policy)
            route = await self._proxies.route(
                host, policy, routable=self._transport_name == "aiohttp"
            )
            hop_headers = with_task_headers(headers, policy, host, page=page)
            request = client.build_request("GET", current, headers=hop_headers, timeout=timeout)
            try:
                with pinned(host, addresses), routed(route):
                    response = await client.send(request, stream=True)
            except UnusableLocation as bad:
                trace.status, trace.headers = bad.status, kept_headers(bad.headers)
                trace.final_url = str(current)
                self._refuse_guarded_host(bad.location, policy, base=current)
                raise FetchAbort("bad_url", str(bad)) from bad
            trace.status = response.status_code
            trace.headers = kept_headers(response.headers)
            trace.final_url = str(current)
            trace.exchange = Exchange.of(request, response)
            if route is not None and response.status_code == 407:
                await _release(response)
                raise self._proxies.refused(route)
            if not 300 <= response.status_code < 400 or response.status_code == 304:
                return response
            await _release(response)
            location = response.headers.get("location", "").strip()
            if not location:
                raise FetchAbort("redirect_no_location", f"{response.status_code} without Location")
            try:
                target = self._parse_hop(current.join(location), policy)
            except httpx.InvalidURL as exc:
                self._refuse_guarded_host(location, policy, base=current)
                raise FetchAbort("bad_url", f"Location {location!r}: {exc}") from exc
            if _loop_key(target) in seen:
                raise FetchAbort("redirect_loop", f"{target} again")
            if len(trace.redirects) >= max_redirects:
                raise FetchAbort("too_many_redirects", f"more than {max_redirects}")
            seen.add(_loop_key(target))
            trace.redirects.append(str(target))
            current = target

    def _parse_hop(self, url: str | httpx.URL, policy: FetchPolicy) -> httpx.URL:
        try:
            return _parse_url(url)
        except FetchAbort:
            self._refuse_guarded_host(str(url), policy)
            raise

    def _refuse_guarded_host(
        self, url: str, policy: FetchPolicy, *, base: httpx.URL | None = None
    ) -> None:
        """Raise network_guard if a URL httpx cannot parse names an address the guard refuses.

        httpx rejects some legacy IPv4 spellings (``0251.0376.0251.0376``, octal with leading
        zeros) that browsers and ``inet_aton`` read as an address: such a URL is never sent
        either way, but the verdict that says why is the guard's, not "bad URL".
        """
        host = _lenient_host(url, str(base or ""))
        self._guard.check_literal(host, allow_private=policy.allow_private_network)

    async def _check_robots(self, url: httpx.URL, policy: FetchPolicy) -> None:
        rules = await self.robots_cache.rules(_robots_key(url), policy)
        if rules.state == "no_answer":
            # the host did not answer: this attempt fails like any transient error would
            raise FetchAbort(rules.detail, f"robots.txt: {rules.error}")
        if rules.state == "unavailable":
            raise FetchAbort("robots_unavailable", rules.detail)
        if not rules.can_fetch(str(url), policy.user_agent):
            raise FetchAbort("robots_disallowed", str(url))

    def _robots_retry_after(self, url: str) -> float | None:
        # the cached error answers every retry until it expires: say when that is
        try:
            key = _robots_key(_parse_url(url))
        except FetchAbort:
            return None
        rules = self.robots_cache.peek(key)
        if rules is None:
            return None
        return max(rules.expires_at - self.robots_cache.now(), 0.0)

    async def _download_robots(self, url: str, policy: FetchPolicy) -> RobotsAnswer:
        trace = _Trace(url=url, final_url=url)
        try:
            async with asyncio.timeout(policy.total_timeout):
                response = await self._open(
                    url, policy, trace, max_redirects=ROBOTS_MAX_REDIRECTS, page=False
                )
                try:
                    if not 200 <= response.status_code < 300:
                        return RobotsAnswer(response.status_code)
                    body = CappedBody(
                        response.headers.get("content-encoding"),
                        max_bytes=ROBOTS_MAX_BYTES,
                        wire_cap=ROBOTS_MAX_BYTES,
                        truncate=True,
                    )
                    async for raw in response.aiter_raw():
                        body.feed(raw)
                        if body.full:
                            break
                    return RobotsAnswer(response.status_code, body.finish())
                finally:
                    await response.aclose()
        except FetchAbort as exc:
            return RobotsAnswer(None, reason=exc.reason, error=exc.detail)
        except TRANSPORT_ERRORS as exc:
            error = f"{type(exc).__name__}: {exc}"
            return RobotsAnswer(None, reason=error_reason(exc), error=error)


async def _release(response: httpx.Response) -> None:
    """Close a response whose body is not wanted.

    A small declared body is read first: the connection then goes back to the pool for the
    next hop (redirects mostly stay on one host) instead of being torn down.
    """
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) <= _DRAIN_MAX:
        with contextlib.suppress(*TRANSPORT_ERRORS):
            async for _ in response.aiter_raw():
                pass
    await response.aclose()


def _robots_key(url: httpx.URL) -> RobotsKey:
    return (url.scheme, _host(url), _port(url))


def _check_declared_length(response: httpx.Response, policy: FetchPolicy) -> None:
    """Refuse before reading when Content-Length already says the body is over a cap."""
    declared = response.headers.get("content-length", "").strip()
    if not declared.isdigit():
        return
    size = int(declared)
    codings = response.headers.get("content-encoding", "").lower().split(",")
    encoded = any(c.strip() not in ("", "identity") for c in codings)
    cap = policy.wire_cap if encoded else min(policy.wire_cap, policy.max_bytes)
    if size > cap:
        raise FetchAbort("too_large", f"Content-Length {size} over {cap}")
