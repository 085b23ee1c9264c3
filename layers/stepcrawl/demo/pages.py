"""HTML of the demo site: every page kind, rendered to the exact bytes served.

The markup imitates a real shop (books.toscrape.com-like): whitespace around titles, entities in
attributes, relative and query-only links, a page-level footer with an off-site link. The
selectors in ``pipelines/demo-shop.yaml`` are written against it; keep the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from stepcrawl.demo.paths import (
    ADMIN_PATH,
    BROKEN_PATHS,
    CALENDAR_START,
    NON_HTTP_LINKS,
    OFFSITE_URL,
    ROBOTS_TXT,
    calendar_path,
    category_path,
    listing_variants,
    product_path,
)
from stepcrawl.demo.shop import Category, Product, ShopModel

__all__ = [
    "Page",
    "admin_page",
    "calendar_page",
    "error_page",
    "home_page",
    "listing_page",
    "product_page",
    "robots_page",
]

_CURRENCY_SIGNS = {"GBP": "£"}


@dataclass(frozen=True, slots=True)
class Page:
    """A response ready to send: status, ``Content-Type`` and the encoded body."""

    status: int
    content_type: str
    body: bytes


def _html(
    title: str, main: str, *, charset: str = "utf-8", header_charset: bool = True, status: int = 200
) -> Page:
    # A charset only in the header gets no meta at all; one only in the meta gets a bare
    # text/html: each category tests exactly one way of declaring it.
    meta = "" if header_charset and charset != "utf-8" else f'<meta charset="{charset}">\n'
    text = (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n'
        f"{meta}<title>{escape(title)} | Demo Shop</title>\n"
        "</head>\n<body>\n"
        '<header class="site-header"><a class="brand" href="/">Demo Shop</a></header>\n'
        f"<main>\n{main}</main>\n"
        '<footer><a href="/#top">Back to top</a> · '
        f'<a class="partner" href="{OFFSITE_URL}">Powered by Example Commerce</a></footer>\n'
        "</body>\n</html>\n"
    )
    content_type = f"text/html; charset={charset}" if header_charset else "text/html"
    return Page(status, content_type, text.encode(charset))


def home_page(model: ShopModel) -> Page:
    nav = "".join(
        f'<li><a href="{category_path(c.slug)}">{escape(c.name)}</a></li>\n'
        for c in model.categories
    )
    year, month = CALENDAR_START
    around = [
        (calendar_path(year, month), "Events calendar"),
        (ADMIN_PATH, "Staff area"),
        (BROKEN_PATHS[0], "Discontinued lines"),
        (BROKEN_PATHS[1], "Last year's bestseller"),
        (BROKEN_PATHS[2], "About us"),
        (OFFSITE_URL, "Our partner shop"),
        *zip(NON_HTTP_LINKS, ("Email us", "Call us", "Open the chat"), strict=True),
    ]
    links = "".join(f'<li><a href="{escape(h)}">{escape(t)}</a></li>\n' for h, t in around)
    main = (
        '<h1 id="top">Welcome to the Demo Shop</h1>\n'
        f'<nav><ul class="nav">\n{nav}</ul></nav>\n'
        f'<section class="around"><h2>Around the shop</h2>\n<ul>\n{links}</ul></section>\n'
    )
    return _html("Home", main)


def listing_page(model: ShopModel, category: Category, page: int) -> Page:
    pages = model.page_count(category.slug)
    cards = "".join(_card(p) for p in model.listing(category.slug, page))
    pager = []
    if page > 1:
        # Query-only hrefs: they resolve against the listing's own path.
        pager.append(f'<li class="previous"><a rel="prev" href="?page={page - 1}&amp;view=grid">')
        pager.append("previous</a></li>\n")
    for number in range(1, pages + 1):
        css = "current" if number == page else "page"
        href = escape(listing_variants(category.slug, number)[1])
        pager.append(f'<li class="{css}"><a href="{href}">{number}</a></li>\n')
    if page < pages:
        pager.append(f'<li class="next"><a rel="next" href="?page={page + 1}&amp;view=grid">')
        pager.append("next</a></li>\n")
    count = len(category.products)
    main = (
        '<ul class="breadcrumb"><li><a href="/">Home</a></li>'
        f'<li class="active">{escape(category.name)}</li></ul>\n'
        f"<h1>{escape(category.name)}</h1>\n"
        f'<p class="results">{count} products, page {page} of {pages}</p>\n'
        f'<ol class="products">\n{cards}</ol>\n'
        f'<ul class="pager">\n{"".join(pager)}</ul>\n'
    )
    return _html(
        f"{category.name}, page {page}",
        main,
        charset=category.charset,
        header_charset=category.charset_in_header,
    )


def _card(product: Product) -> str:
    title = escape(product.title)
    # Two links per product: a relative one and one with a fragment.
    return (
        '<li><article class="product_pod">\n'
        f'<h3><a href="../../product/{product.sku}.html" title="{title}">{title}</a></h3>\n'
        f'<p class="price">{_price(product)}</p>\n'
        f'<a class="reviews" href="{product_path(product.sku)}#reviews">Reviews</a>\n'
        "</article></li>\n"
    )


def product_page(product: Product, category: Category) -> Page:
    available = "In stock" if product.stock else "Out of stock"
    main = (
        '<ul class="breadcrumb"><li><a href="/">Home</a></li>'
        f'<li><a href="{category_path(category.slug)}">{escape(category.name)}</a></li>'
        f'<li class="active">{escape(product.title)}</li></ul>\n'
        '<article class="product_page" itemscope itemtype="https://schema.org/Product">\n'
        # Whitespace around the title, as template engines leave it: the pipeline strips it.
        f'<h1 itemprop="name">\n      {escape(product.title)}\n    </h1>\n'
        f'<p class="price" itemprop="price" content="{product.price:.2f}">{_price(product)}</p>\n'
        f'<p class="availability">\n    {available} ({product.stock} available)\n</p>\n'
        f'<p class="star-rating {product.rating.capitalize()}" '
        f'title="{product.stars} out of 5">Rated {product.stars} out of 5</p>\n'
        '<table class="product-info">\n'
        f'<tr><th>SKU</th><td itemprop="sku">{product.sku}</td></tr>\n'
        f'<tr><th>Category</th><td itemprop="category">{escape(category.name)}</td></tr>\n'
        f'<tr><th>Currency</th><td itemprop="priceCurrency">{product.currency}</td></tr>\n'
        "</table>\n"
        '<div id="description"><h2>Description</h2>\n'
        f'<p itemprop="description">{escape(product.description)}</p></div>\n'
        '<p><a href="#reviews">Read the reviews</a></p>\n'
        '<section id="reviews"><h2>Reviews</h2><p>No reviews yet.</p></section>\n'
        "</article>\n"
    )
    return _html(
        product.title, main, charset=category.charset, header_charset=category.charset_in_header
    )


def _price(product: Product) -> str:
    sign = _CURRENCY_SIGNS.get(product.currency, product.currency + " ")
    return f"{sign}{product.price:.2f}"


def calendar_page(year: int, month: int) -> Page:
    before = (year, month - 1) if month > 1 else (year - 1, 12)
    after = (year, month + 1) if month < 12 else (year + 1, 1)
    main = (
        f"<h1>Events in {year:04d}-{month:02d}</h1>\n<p>No events this month.</p>\n"
        f'<p><a rel="prev" href="{calendar_path(*before)}">previous month</a> · '
        f'<a rel="next" href="{calendar_path(*after)}">next month</a></p>\n'
    )
    return _html(f"Events {year:04d}-{month:02d}", main)


def admin_page() -> Page:
    return _html("Staff area", "<h1>Staff area</h1>\n<p>Robots are not welcome here.</p>\n")


def robots_page() -> Page:
    return Page(200, "text/plain; charset=utf-8", ROBOTS_TXT.encode())


_REASONS = {404: "Page not found", 500: "Internal server error"}


def error_page(status: int) -> Page:
    reason = _REASONS.get(status, "Error")
    main = f'<h1>{reason}</h1>\n<p>Try the <a href="/">home page</a>.</p>\n'
    return _html(reason, main, status=status)
