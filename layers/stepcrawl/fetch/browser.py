"""The browser fetcher: pages loaded in headless Chromium through Playwright (``render:
browser``; docs/pipelines.md, "Browser rendering").

It answers like :class:`~stepcrawl.fetch.Fetcher` (the fetch stage's ``BatchFetcher``): one
:class:`~stepcrawl.fetch.FetchResult` per URL, whose body is the rendered DOM, so a rendered
page goes through the same extraction as a fetched one. Playwright is imported here only, on
first use: the plain fetch path never loads it (the render function's image ships it; the
Lambda layer does not).

Safety, per page:

* the page URL passes what a plain fetch passes first: an allowed domain (``off_domain``),
  the network guard (``network_guard``), robots.txt (``robots_disallowed``; read and cached
  by a plain :class:`~stepcrawl.fetch.Fetcher`, which also answers ``crawl_delay``);
* every request the browser makes is intercepted (``context.route``): a host whose address the
  guard refuses (private, loopback, link-local unless ``allow_private_network``; cloud
  metadata always) is aborted, sub-resources included; a main-frame navigation (a redirect, a
  script's ``location = ...``) must also stay on the allowed domains and be allowed by
  robots.txt. Sub-resources of other hosts (a CDN's scripts) load under the guard: the page
  needs them to render, as in any browser. Images, media and fonts are not loaded (the DOM
  does not need them). Only http(s) is requested;
* no downloads (``accept_downloads=False``: a download ends the page ``content_type``), no
  service workers, one fresh browser context (cookies, storage) per page;
* a bounded wait: the whole page (load, the wait for it to be ready, reading the DOM) within
  the task's ``render_timeout``; a page not ready by then ends ``render_timeout`` (fatal: the
  same page would not get ready on a retry). What "ready" is comes from the task
  (:meth:`~stepcrawl.fetch.render_options.RenderOptions.page_wait`): its ``wait_for``, else
  its item selectors; a page whose item selectors never matched is flagged
  (``FetchResult.render_unmatched``) for the task's count. Closing is bounded too, and a
  browser that fails to close a page, or crashed, is thrown away and launched anew for the
  next page.

Without Playwright or a Chromium executable every URL ends ``render_unavailable`` (fatal),
its detail saying what to install.

What a browser cannot give: the guard resolves a host, then Chromium resolves it again (the
plain fetcher pins the address it checked; a browser cannot be told to). A host that
re-resolves to a private address between the two (DNS rebinding) gets one request through;
run the render function outside any network that matters (its own VPC-less Lambda does).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from stepcrawl.fetch.abort import FetchAbort
from stepcrawl.fetch.classify import classify, http_reason
from stepcrawl.fetch.client import Fetcher
from stepcrawl.fetch.guard import NetworkGuard
from stepcrawl.fetch.policy import FetchPolicy
from stepcrawl.fetch.readiness import ms_until, not_ready, wait_until_ready
from stepcrawl.fetch.render_options import ITEMS, PageWait
from stepcrawl.fetch.result import FetchResult
from stepcrawl.names import ENV_CHROMIUM
from stepcrawl.pipeline.render_options import LOAD_EVENT, NETWORK_IDLE

__all__ = [
    "BROWSERS",
    "LAUNCH_ARGS",
    "MAX_PAGES_AT_ONCE",
    "BrowserFetcher",
    "RenderUnavailableError",
    "find_chromium",
]

logger = logging.getLogger("stepcrawl.fetch.browser")

#: Executables looked for on PATH, in order, unless ``STEPCRAWL_CHROMIUM`` names one.
BROWSERS: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Headless in a sandboxless container (Lambda, CI as root): no GPU, no background calls.
LAUNCH_ARGS: Final = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-zygote",
)
#: Pages rendered at once per container, whatever the fetch concurrency: a page costs tens of
#: MB and a CPU share, not a socket.
MAX_PAGES_AT_ONCE: Final = 4
#: A browser is replaced after this many pages (memory grows with what pages leave behind).
PAGES_PER_BROWSER: Final = 200
#: Seconds allowed to close a page's context, and to launch a browser.
CLOSE_TIMEOUT: Final = 5.0
LAUNCH_TIMEOUT: Final = 30.0
#: Resource types never requested: the DOM does not need them.
SKIPPED_TYPES: Final = frozenset({"image", "media", "font"})
_MAX_DETAIL: Final = 500


class RenderUnavailableError(Exception):
    """No browser to render with (Playwright or Chromium missing, or Chromium will not start)."""


def find_chromium(chosen: str | None = None) -> str | None:
    """The Chromium executable: ``chosen`` (the function's ``STEPCRAWL_CHROMIUM``, read by
    :class:`~stepcrawl.environment.WorkerEnvironment`), else the first of :data:`BROWSERS`
    on PATH; None if there is none."""
    if chosen:
        return chosen
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@dataclass
class _Trace:
    """What one page's load saw."""

    url: str
    final_url: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    redirects: list[str] = field(default_factory=list)
    #: Requests aborted by the guard or the task's rules: "URL: reason: detail".
    blocked: list[str] = field(default_factory=list)
    #: Why the main document itself was refused (the page's reason), if it was.
    refusal: FetchAbort | None = None
    skipped: int = 0
    #: What the page waits for to be ready, and whether its wait ended without it.
    wait: PageWait = field(default_factory=lambda: PageWait(LOAD_EVENT))
    unready: bool = False


class BrowserFetcher:
    """Renders URLs in one headless Chromium per instance (launched on first use, replaced
    when it crashes, fails to close a page, or has rendered :data:`PAGES_PER_BROWSER` pages:
    then the pages still rendering in it finish there, and it is closed after the last).

    Like :class:`~stepcrawl.fetch.Fetcher`, an instance belongs to one event loop (a
    container's); :meth:`aclose` ends the browser.
    """

    def __init__(
        self,
        *,
        guard: NetworkGuard | None = None,
        plain: Fetcher | None = None,
        executable: str | None = None,
        launch_args: Sequence[str] = LAUNCH_ARGS,
    ) -> None:
        self._guard = guard or NetworkGuard()
        #: robots.txt (cached per origin) and Crawl-delay come from a plain fetcher
        self._plain = plain or Fetcher(guard=self._guard)
        self._executable = executable
        self._launch_args = list(launch_args)
        self._playwright: Any = None
        self._browser: Any = None
        self._pages = 0
        #: Pages being rendered, per browser: a recycled browser is closed after its last
        #: one, not under the pages still rendering in it.
        self._in_flight: dict[Any, int] = {}
        self._launching: asyncio.Lock | None = None

    # ------------------------------------------------------------------ the BatchFetcher side

    async def fetch_many(
        self,
        urls: Sequence[str],
        policy: FetchPolicy,
        concurrency: int = MAX_PAGES_AT_ONCE,
        *,
        headers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FetchResult]:
        """Render ``urls``, at most ``min(concurrency, MAX_PAGES_AT_ONCE)`` at once; results in
        input order. ``headers`` (an incremental task's conditional headers) are not sent: a
        browser revalidates by itself, and a 304 has no DOM to render (docs/pipelines.md)."""
        del headers
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        gate = asyncio.Semaphore(min(concurrency, MAX_PAGES_AT_ONCE))

        async def one(url: str) -> FetchResult:
            async with gate:
                return await self.fetch(url, policy)

        return list(await asyncio.gather(*(one(u) for u in urls)))

    async def crawl_delay(self, url: str, policy: FetchPolicy) -> float | None:
        return await self._plain.crawl_delay(url, policy)

    async def aclose(self) -> None:
        await self._drop_browser()
        for retired in list(self._in_flight):  # recycled, with pages that never ended
            await self._close(retired)
        if self._playwright is not None:
            playwright, self._playwright = self._playwright, None
            try:
                await asyncio.wait_for(playwright.stop(), CLOSE_TIMEOUT)
            except Exception:
                logger.warning("the Playwright driver did not stop cleanly", exc_info=True)
        await self._plain.aclose()

    # ------------------------------------------------------------------------------ one page

    async def fetch(self, url: str, policy: FetchPolicy) -> FetchResult:
        """Render one URL under ``policy``; a result whatever happens, within
        ``policy.render.timeout`` (plus the bounded close)."""
        started = time.perf_counter()
        trace = _Trace(url=url, final_url=url, wait=policy.render.page_wait(url))
        body, reason, detail = b"", "ok", ""
        try:
            body, reason, detail = await self._render(url, policy, trace)
        except RenderUnavailableError as exc:
            reason, detail = "render_unavailable", str(exc)
        except FetchAbort as exc:
            reason, detail = exc.reason, exc.detail
        except Exception as exc:  # a bug or a browser crash must end this URL, not its batch
            logger.warning("render of %s failed: %s", url, exc, exc_info=True)
            reason, detail = "render_error", f"{type(exc).__name__}: {exc}"
            await self._drop_browser()  # it may be the browser: start afresh
        if trace.blocked:
            shown = "; ".join(trace.blocked[:5])
            more = f" (+{len(trace.blocked) - 5} more)" if len(trace.blocked) > 5 else ""
            detail = f"{detail}; blocked {len(trace.blocked)} request(s): {shown}{more}".lstrip(
                "; "
            )
        return FetchResult(
            url=url,
            final_url=trace.final_url,
            status=trace.status,
            headers=trace.headers,
            body=body,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            redirects=trace.redirects,
            outcome=classify(reason, trace.status),
            reason=reason,
            detail=detail[:_MAX_DETAIL],
            # the task's item selectors never matched: failed (render_timeout) or read as it was
            render_unmatched=trace.wait.kind == ITEMS
            and (trace.unready or reason == "render_timeout"),
        )

    async def _render(self, url: str, policy: FetchPolicy, trace: _Trace) -> tuple[bytes, str, str]:
        await self._check_navigation(url, policy)  # nothing is launched for a refused URL
        browser = await self._browser_for_page()
        try:
            return await self._in_context(browser, url, policy, trace)
        finally:
            await self._page_done(browser)

    async def _in_context(
        self, browser: Any, url: str, policy: FetchPolicy, trace: _Trace
    ) -> tuple[bytes, str, str]:
        budget = policy.render.timeout
        deadline = time.monotonic() + budget
        context = await browser.new_context(
            user_agent=policy.user_agent,
            accept_downloads=False,
            service_workers="block",
        )
        try:
            async with asyncio.timeout(budget):
                return await self._load(context, url, policy, trace, deadline)
        except TimeoutError:
            raise FetchAbort("render_timeout", not_ready(trace.wait, budget)) from None
        finally:
            try:
                await asyncio.wait_for(context.close(), CLOSE_TIMEOUT)
            except Exception:  # noqa: BLE001 - a browser that cannot close a page is replaced
                logger.warning("closing the page of %s failed; replacing the browser", url)
                if browser is self._browser:
                    await self._drop_browser()

    async def _load(
        self, context: Any, url: str, policy: FetchPolicy, trace: _Trace, deadline: float
    ) -> tuple[bytes, str, str]:
        from playwright.async_api import Error as PlaywrightError  # noqa: PLC0415 - render only
        from playwright.async_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415

        await context.route("**/*", self._router(policy, trace))
        page = await context.new_page()
        budget = policy.render.timeout
        try:
            response = await page.goto(
                url,
                wait_until="networkidle" if trace.wait.kind == NETWORK_IDLE else "load",
                timeout=ms_until(deadline),
            )
        except PlaywrightTimeout:
            raise FetchAbort("render_timeout", not_ready(trace.wait, budget)) from None
        except PlaywrightError as exc:
            if trace.refusal is not None:
                raise trace.refusal from None
            if "Download is starting" in str(exc):
                raise FetchAbort("content_type", "the page is a download") from None
            raise FetchAbort("render_error", str(exc).splitlines()[0]) from None
        if response is None:  # same-document navigation: cannot happen for a first goto
            raise FetchAbort("render_error", "no response for the page")
        await self._record(response, trace)
        if trace.refusal is not None:  # a script navigated somewhere refused
            raise trace.refusal
        status = response.status
        if not 200 <= status < 300:
            return b"", http_reason(status), ""
        if not policy.allows_content_type(trace.headers.get("content-type")):
            raise FetchAbort("content_type", trace.headers.get("content-type") or "no Content-Type")
        trace.unready = not await wait_until_ready(page, trace.wait, budget, deadline, url)
        html: str = await page.content()
        trace.final_url = page.url or trace.final_url
        body = html.encode("utf-8")
        if len(body) > policy.max_bytes:
            raise FetchAbort("too_large", f"rendered DOM of {len(body)} bytes")
        # The body is the DOM now, serialized as UTF-8, whatever the response said.
        trace.headers["content-type"] = "text/html; charset=utf-8"
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            trace.headers.pop(name, None)
        unready = f"{not_ready(trace.wait, budget)}; read as it was" if trace.unready else ""
        return body, "ok", unready

    def _router(self, policy: FetchPolicy, trace: _Trace) -> Any:
        """The page's request handler: each request sent, or aborted with the reason kept."""
        verdicts: dict[tuple[str, int], FetchAbort | None] = {}

        own = _task_headers(policy)

        async def route(route: Any, request: Any) -> None:
            if request.resource_type in SKIPPED_TYPES:
                trace.skipped += 1
                await route.abort("blockedbyclient")
                return
            refusal = await self._judge(request, policy, verdicts)
            if refusal is None:
                # the task's headers and cookies go to its own hosts only, as in a plain fetch
                mine = own and policy.allows_host(httpx.URL(request.url).host)
                await route.continue_(headers={**request.headers, **own} if mine else None)
                return
            trace.blocked.append(f"{request.url}: {refusal.reason}: {refusal.detail}")
            if _main_navigation(request):
                trace.refusal = refusal
            await route.abort("blockedbyclient")

        return route

    async def _record(self, response: Any, trace: _Trace) -> None:
        trace.status = response.status
        trace.final_url = response.url
        trace.headers = {k.lower(): v for k, v in (await response.all_headers()).items()}
        hops: list[str] = []
        request = response.request.redirected_from
        while request is not None:
            hops.append(request.url)
            request = request.redirected_from
        if hops:
            trace.redirects = [*reversed(hops[:-1]), response.url]

    # -------------------------------------------------------------------------- the rules

    async def _judge(
        self, request: Any, policy: FetchPolicy, verdicts: dict[tuple[str, int], FetchAbort | None]
    ) -> FetchAbort | None:
        """Why the browser must not send ``request`` (None: it may)."""
        main = _main_navigation(request)
        try:
            if main:
                await self._check_navigation(request.url, policy)
                return None
            parsed = _http_url(request.url)
            key = (parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80))
            if key not in verdicts:
                try:
                    await self._guard.check(*key, allow_private=policy.allow_private_network)
                    verdicts[key] = None
                except FetchAbort as refusal:
                    verdicts[key] = refusal
            return verdicts[key]
        except FetchAbort as refusal:
            return refusal

    async def _check_navigation(self, url: str, policy: FetchPolicy) -> None:
        """A page (or a main-frame hop): an allowed domain, the guard, robots.txt."""
        parsed = _http_url(url)
        if not policy.allows_host(parsed.host):
            raise FetchAbort("off_domain", parsed.host)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        await self._guard.check(parsed.host, port, allow_private=policy.allow_private_network)
        if policy.obey_robots:
            rules = await self._plain.robots(url, policy)
            if rules.state == "no_answer":
                raise FetchAbort(rules.detail, f"robots.txt: {rules.error}")
            if rules.state == "unavailable":
                raise FetchAbort("robots_unavailable", rules.detail)
            if not rules.can_fetch(url, policy.user_agent):
                raise FetchAbort("robots_disallowed", url)

    # --------------------------------------------------------------------------- the browser

    async def _browser_for_page(self) -> Any:
        if self._launching is None:
            self._launching = asyncio.Lock()
        async with self._launching:
            if self._browser is not None and not self._browser.is_connected():
                await self._drop_browser()
            elif self._browser is not None and self._pages >= PAGES_PER_BROWSER:
                retired, self._browser = self._browser, None
                if not self._in_flight.get(retired):
                    await self._close(retired)
            if self._browser is None:
                self._browser = await self._launch()
                self._pages = 0
            self._pages += 1
            self._in_flight[self._browser] = self._in_flight.get(self._browser, 0) + 1
            return self._browser

    async def _page_done(self, browser: Any) -> None:
        """One page of ``browser`` is done: a retired browser goes with its last page."""
        if browser not in self._in_flight:
            return  # dropped (and closed) meanwhile
        self._in_flight[browser] -= 1
        if not self._in_flight[browser] and browser is not self._browser:
            await self._close(browser)

    async def _launch(self) -> Any:
        try:
            from playwright.async_api import async_playwright  # noqa: PLC0415 - render only
        except ImportError:
            raise RenderUnavailableError(
                "playwright is not installed: pip install 'stepcrawl[render]' (the render "
                "function's image has it)"
            ) from None
        executable = self._executable or find_chromium()
        if executable is None or not Path(executable).exists():
            raise RenderUnavailableError(
                f"no Chromium executable ({executable or ', '.join(BROWSERS)} not found): "
                f"install it (apt-get install chromium) or set {ENV_CHROMIUM} to its path"
            )
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        try:
            return await self._playwright.chromium.launch(
                executable_path=executable,
                args=self._launch_args,
                headless=True,
                timeout=LAUNCH_TIMEOUT * 1000,
            )
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RenderUnavailableError(f"Chromium ({executable}) did not start: {first}") from exc

    async def _drop_browser(self) -> None:
        browser, self._browser = self._browser, None
        if browser is not None:
            await self._close(browser)

    async def _close(self, browser: Any) -> None:
        self._in_flight.pop(browser, None)
        try:
            await asyncio.wait_for(browser.close(), CLOSE_TIMEOUT)
        except Exception:
            logger.warning("the browser did not close cleanly", exc_info=True)


def _http_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchAbort("bad_url", f"{url}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise FetchAbort("bad_url", f"{url}: only http(s) URLs are requested")
    return parsed


def _main_navigation(request: Any) -> bool:
    """A navigation of the page's main frame (the page, a redirect, a script's location)."""
    if not request.is_navigation_request():
        return False
    try:
        return request.frame.parent_frame is None
    except Exception:  # noqa: BLE001 - a frame gone (detached) is no main frame
        return False


def _task_headers(policy: FetchPolicy) -> dict[str, str]:
    """The task's own headers and its Cookie line (sent to the task's own hosts only)."""
    headers = dict(policy.request.headers)
    if policy.request.cookie:
        headers["Cookie"] = policy.request.cookie
    return headers
