"""The demo site's URL layout: where each page kind lives, and the hazard URLs it links to."""

from __future__ import annotations

import re

__all__ = [
    "ADMIN_PATH",
    "BROKEN_PATHS",
    "CALENDAR_PATTERN",
    "CALENDAR_START",
    "NON_HTTP_LINKS",
    "OFFSITE_URL",
    "PRODUCT_PATTERN",
    "ROBOTS_TXT",
    "calendar_path",
    "category_path",
    "listing_variants",
    "product_path",
]

#: Robots-disallowed (robots.txt: ``Disallow: /admin/``); served with 200 so that a crawler
#: ignoring robots.txt shows up in the request log instead of failing quietly.
ADMIN_PATH = "/admin/secret"

#: Linked from the home page, all 404. The product one matches :data:`PRODUCT_PATTERN`, so an
#: engine that extracts from error pages or assumes every product URL exists is caught.
BROKEN_PATHS: tuple[str, ...] = (
    "/category/discontinued/",
    "/product/deadbeefdeadbeef.html",
    "/about-us.html",
)

#: Off-site; ``.invalid`` never resolves (RFC 2606), and a correct crawl never tries.
OFFSITE_URL = "http://example.invalid/"

#: Links no HTTP crawler may fetch, on the home page.
NON_HTTP_LINKS: tuple[str, ...] = (
    "mailto:shop@example.invalid",
    "tel:+440000000000",
    "javascript:void(0)",
)

#: Matches product page paths (and full URLs ending in one).
PRODUCT_PATTERN = re.compile(r"/product/(?P<sku>[0-9a-f]{16})\.html$")

#: An infinite crawler trap: every month links to the next and the previous one.
CALENDAR_PATTERN = re.compile(r"^/calendar/(?P<year>\d{4})-(?P<month>0[1-9]|1[0-2])/$")
CALENDAR_START = (2024, 1)

ROBOTS_TXT = """\
# Demo shop: everything except the staff area may be crawled.
User-agent: *
Disallow: /admin/
"""


def category_path(slug: str) -> str:
    """A category's first listing page, as the home page links it."""
    return f"/category/{slug}/"


def listing_variants(slug: str, page: int) -> tuple[str, str]:
    """The two spellings the site links for one listing page: ``page`` first, ``view`` first.

    They differ only in query order; a crawler that canonicalizes URLs fetches one of them.
    """
    base = category_path(slug)
    return f"{base}?page={page}&view=grid", f"{base}?view=grid&page={page}"


def product_path(sku: str) -> str:
    return f"/product/{sku}.html"


def calendar_path(year: int, month: int) -> str:
    return f"/calendar/{year:04d}-{month:02d}/"
