"""A deterministic demo shop served on 127.0.0.1: the crawl engine's test site and the demo.

:class:`ShopModel` is the catalogue (pure data) and knows what a correct crawl extracts
(:meth:`ShopModel.expected_items`); :class:`DemoSite` serves it with realistic crawl hazards
(robots-disallowed, broken, off-site and non-HTTP links, a crawler trap, URL variants, a flaky
and a slow page, pages in ISO-8859-1 and windows-1252) and logs every request.
``pipelines/demo-shop.yaml`` is the pipeline that crawls it.

    with DemoSite() as site:
        crawl(site.url)
        assert site.log.hits(ADMIN_PATH) == 0
"""

from __future__ import annotations

from stepcrawl.demo.pages import Page
from stepcrawl.demo.paths import (
    ADMIN_PATH,
    BROKEN_PATHS,
    CALENDAR_PATTERN,
    NON_HTTP_LINKS,
    OFFSITE_URL,
    PRODUCT_PATTERN,
    ROBOTS_TXT,
    category_path,
    listing_variants,
    product_path,
)
from stepcrawl.demo.requestlog import LoggedRequest, RequestLog
from stepcrawl.demo.shop import RATINGS, Category, Charset, ExpectedItem, Product, Rating, ShopModel
from stepcrawl.demo.site import DEMO_PORT, FLAKY_FAILURES, DemoSite

__all__ = [
    "ADMIN_PATH",
    "BROKEN_PATHS",
    "CALENDAR_PATTERN",
    "DEMO_PORT",
    "FLAKY_FAILURES",
    "NON_HTTP_LINKS",
    "OFFSITE_URL",
    "PRODUCT_PATTERN",
    "RATINGS",
    "ROBOTS_TXT",
    "Category",
    "Charset",
    "DemoSite",
    "ExpectedItem",
    "LoggedRequest",
    "Page",
    "Product",
    "Rating",
    "RequestLog",
    "ShopModel",
    "category_path",
    "listing_variants",
    "product_path",
]
