"""The browser fetcher against a JavaScript site on 127.0.0.1, with the OS's Chromium (one
browser for the module; skipped, saying why, where there is none).

It proves: the rendered DOM is the body (products written after the load event, with
wait_for); the network guard applies to the page's own requests (the cloud metadata address
always; another loopback address when private networks are not allowed, 127.0.0.1 standing in
for the internet); robots.txt is obeyed for the page; a wait_for that never matches ends the
page failed, render_timeout, within its cap; a missing browser is a clear failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from tests.helpers.js_site import PRODUCTS, JsSite, js_site

from stepcrawl.fetch import browser as browser_module
from stepcrawl.fetch.browser import BrowserFetcher
from stepcrawl.fetch.policy import FetchPolicy
from stepcrawl.fetch.render_options import RenderOptions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[JsSite]:
    with js_site(api_delay=0.2) as served:
        yield served


def policy(wait_for: str | None = "ul.products li", timeout: float = 10.0) -> FetchPolicy:
    return FetchPolicy(render=RenderOptions(wait_for, timeout))


def test_the_body_is_the_rendered_dom(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    first, second = loop.run_until_complete(
        browser.fetch_many([f"{site.base}/", f"{site.base}/page/2"], policy(), 4)
    )
    assert (first.outcome, first.status, second.outcome) == ("ok", 200, "ok")
    assert first.headers["content-type"] == "text/html; charset=utf-8"
    for result, page in ((first, 1), (second, 2)):
        for product in PRODUCTS[page]:
            assert str(product["name"]).encode() in result.body
    assert b'class="next" href="/page/2"' in first.body


def test_load_event_alone_misses_what_comes_after_it(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    result = loop.run_until_complete(browser.fetch(f"{site.base}/", policy(wait_for="load")))
    assert result.outcome == "ok"
    assert b"Brass lamp" not in result.body  # the API answers after the load event
    # no wait_for, and no rule applies to the page (a listing): ready once the network has
    # been idle for 500 ms, after the API's answer
    listing = loop.run_until_complete(browser.fetch(f"{site.base}/", policy(wait_for=None)))
    assert listing.outcome == "ok", listing.detail
    assert b"Brass lamp" in listing.body
    assert not listing.render_unmatched


def test_the_guard_blocks_private_and_metadata_sub_requests(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    result = loop.run_until_complete(browser.fetch(f"{site.base}/leaky", policy("p.blocked")))
    assert result.outcome == "ok", result.detail
    assert b'<p class="blocked">' in result.body
    assert b'<p class="leaked">' not in result.body
    assert "169.254.169.254" in result.detail
    assert "cloud_metadata" in result.detail
    assert "127.0.0.2" in result.detail
    assert "loopback" in result.detail
    assert site.hits_of("/logo.png") == 0  # images are never loaded


def test_allow_private_network_lets_loopback_through_but_never_metadata(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    allowed = FetchPolicy(allow_private_network=True, render=RenderOptions("p", 5))
    result = loop.run_until_complete(browser.fetch(f"{site.base}/leaky", allowed))
    assert result.outcome == "ok", result.detail
    # 127.0.0.2 was asked (nothing listens there; the guard let it go), metadata never
    assert "cloud_metadata" in result.detail
    assert "127.0.0.2" not in result.detail


def test_a_refused_page_is_not_loaded(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    robots = loop.run_until_complete(browser.fetch(f"{site.base}/private/page", policy()))
    assert (robots.outcome, robots.reason) == ("fatal", "robots_disallowed")
    guarded = loop.run_until_complete(browser.fetch("http://127.0.0.3:9/", policy()))
    assert (guarded.outcome, guarded.reason) == ("fatal", "network_guard")
    off = FetchPolicy(allowed_domains=("example.com",), render=RenderOptions())
    result = loop.run_until_complete(browser.fetch(f"{site.base}/", off))
    assert (result.outcome, result.reason) == ("fatal", "off_domain")
    assert site.hits_of("/private/page") == 0


def test_a_page_that_never_gets_ready_ends_failed_within_its_cap(
    site: JsSite, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    started = time.monotonic()
    result = loop.run_until_complete(browser.fetch(f"{site.base}/never", policy(".ready", 1.5)))
    took = time.monotonic() - started
    assert (result.outcome, result.reason) == ("fatal", "render_timeout")
    assert "wait_for '.ready'" in result.detail
    assert "1.5s" in result.detail
    assert 1.4 < took < 1.5 + 5  # the cap, plus closing the page at most
    # the browser still renders afterwards
    after = loop.run_until_complete(browser.fetch(f"{site.base}/", policy()))
    assert after.outcome == "ok"


def test_a_recycled_browser_is_closed_after_its_last_page_not_under_it(
    site: JsSite,
    browser: BrowserFetcher,
    loop: asyncio.AbstractEventLoop,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(browser_module, "PAGES_PER_BROWSER", 2)  # recycled every 2 pages
    urls = [f"{site.base}/", f"{site.base}/page/2"] * 4
    results = loop.run_until_complete(browser.fetch_many(urls, policy(), 4))
    assert [r.reason for r in results] == ["ok"] * len(urls), [r.detail for r in results]


def test_no_browser_is_a_clear_failure(site: JsSite) -> None:
    fetcher = BrowserFetcher(executable="/nonexistent/chromium")
    loop = asyncio.new_event_loop()
    try:
        result = loop.run_until_complete(
            fetcher.fetch(f"{site.base}/", FetchPolicy(allow_private_network=True))
        )
        loop.run_until_complete(fetcher.aclose())
    finally:
        loop.close()
    assert (result.outcome, result.reason) == ("fatal", "render_unavailable")
    assert "apt-get install chromium" in result.detail
    assert "STEPCRAWL_CHROMIUM" in result.detail
