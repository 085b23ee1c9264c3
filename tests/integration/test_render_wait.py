"""A rendered page without ``wait_for`` waits for what its task extracts, with the OS's
Chromium (one browser for the module; skipped, saying why, where there is none), on the
generated shop of bench/render_wait.py whose item pages get their product from a script
300 ms, 1,500 ms (or never) after the load event.

It proves: an item page is read once its item selector matches, however late after load
(within render_timeout), where ``wait_for: load`` reads it before; one whose selector never
matches ends ``render_timeout`` within its cap, flagged; a page only rules without ``match``
apply to is read as it was at the end instead, flagged too; a selector Chromium cannot read
is not waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.helpers.bench import load_bench

from stepcrawl.extract import parse_page
from stepcrawl.fetch import FetchResult
from stepcrawl.fetch.browser import BrowserFetcher

pytestmark = pytest.mark.slow

bench = load_bench("render_wait")


@pytest.fixture(scope="module")
def site() -> Iterator[Any]:
    with bench.late_site() as served:
        yield served


def render(
    site: Any,
    browser: BrowserFetcher,
    loop: asyncio.AbstractEventLoop,
    urls: list[str],
    **keys: Any,
) -> tuple[list[FetchResult], list[list[str]], float]:
    """``urls`` rendered as :func:`late_pipeline` (``keys``) says; their products' names and
    the seconds it took."""
    policy, task = bench.late_policy(site, **keys)
    started = time.monotonic()
    results = loop.run_until_complete(browser.fetch_many(urls, policy, 4))
    took = time.monotonic() - started
    names = [
        [item["name"] for item in parse_page(r.body, "text/html", r.url, task).items]
        for r in results
    ]
    return results, names, took


def test_an_item_page_is_read_once_its_item_selector_matches(
    site: Any, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    urls = [site.item(300, 1), site.item(1500, 2)]
    results, names, _ = render(site, browser, loop, urls)
    assert [r.outcome for r in results] == ["ok", "ok"], [r.detail for r in results]
    assert names == [[bench.product_name(1)], [bench.product_name(2)]]
    assert not any(r.render_unmatched for r in results)
    # wait_for: load reads the page at its load event, before the product (today's miss)
    results, names, _ = render(site, browser, loop, [site.item(1500, 3)], wait_for="load")
    assert results[0].outcome == "ok"
    assert names == [[]]


def test_an_item_page_whose_product_never_comes_ends_render_timeout_within_its_cap(
    site: Any, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    results, _, took = render(site, browser, loop, [site.item("never", 4)], render_timeout=2)
    (result,) = results
    assert (result.outcome, result.reason) == ("fatal", "render_timeout")
    assert result.render_unmatched
    assert "no item selector matched ('#app .product')" in result.detail
    assert "render_timeout 2s" in result.detail
    assert 1.9 < took < 2 + 5  # the cap, plus closing the page at most


def test_a_page_only_rules_without_match_apply_to_is_read_as_it_was(
    site: Any, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    urls = [site.item("never", 5), site.item(300, 6)]
    results, names, took = render(site, browser, loop, urls, render_timeout=8, match=None)
    assert [r.outcome for r in results] == ["ok", "ok"], [r.detail for r in results]
    assert [r.render_unmatched for r in results] == [True, False]
    assert "read as it was" in results[0].detail
    assert names == [[], [bench.product_name(6)]]
    assert took < 8 + 5


def test_a_selector_chromium_cannot_read_is_not_waited_for(
    site: Any, browser: BrowserFetcher, loop: asyncio.AbstractEventLoop
) -> None:
    # valid for the extractor's parser (the pipeline loads), unknown to Chromium's: waiting
    # for it would end the page render_timeout (a rule's match selected it)
    results, _, _ = render(site, browser, loop, [site.item(300, 7)], container="div:blank")
    assert results[0].outcome == "ok", results[0].detail
    assert not results[0].render_unmatched
