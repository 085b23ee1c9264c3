"""The demo shop: a deterministic catalogue, served with its crawl hazards, and its pipeline."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import pytest
from selectolax.lexbor import LexborHTMLParser

from stepcrawl.demo import (
    ADMIN_PATH,
    BROKEN_PATHS,
    DEMO_PORT,
    FLAKY_FAILURES,
    NON_HTTP_LINKS,
    OFFSITE_URL,
    PRODUCT_PATTERN,
    RATINGS,
    ROBOTS_TXT,
    DemoSite,
    ShopModel,
    category_path,
    listing_variants,
    product_path,
)
from stepcrawl.pipeline import CrawlTask, TransformTask, load_pipeline

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "demo-shop.yaml"
HREF = re.compile(rb"""<a\b[^>]*?\bhref="([^"]*)\"""")
META_CHARSET = re.compile(rb'<meta charset="([^"]+)"')


class Response:
    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self.content_type: str = headers.get("Content-Type", "")
        self.body = body

    @property
    def header_charset(self) -> str | None:
        _, _, charset = self.content_type.partition("charset=")
        return charset or None

    @property
    def meta_charset(self) -> str | None:
        found = META_CHARSET.search(self.body)
        return found[1].decode() if found else None

    @property
    def text(self) -> str:
        return self.body.decode(self.header_charset or self.meta_charset or "utf-8")


def get(url: str, method: str = "GET") -> Response:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return Response(answer.status, answer.headers, answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return Response(error.code, error.headers, error.read())


@pytest.fixture(scope="module")
def site() -> Iterator[DemoSite]:
    """The default shop without the deliberate misbehaviour (tests of that build their own)."""
    with DemoSite(flaky=False, slow_delay=0) as running:
        yield running


# ------------------------------------------------------------------------------------- model


def test_same_seed_same_items_other_seed_other_items() -> None:
    items = ShopModel().expected_items()
    assert items == ShopModel(seed=7).expected_items()
    assert len(items) == 5 * 23
    # Pinned: integration tests and the demo may quote these; a change must be deliberate.
    assert items[0] == {
        "sku": "83cccd873f8b4901",
        "title": "Seeded Baguette",
        "price": 1.49,
        "stock": 6,
        "rating": "five",
        "category": "Bakery",
    }
    other = ShopModel(seed=8).expected_items()
    assert {i["sku"] for i in other}.isdisjoint(i["sku"] for i in items)


def test_products_are_well_formed() -> None:
    model = ShopModel(categories=8, products_per_category=40, page_size=7)
    assert len(model.products) == 320
    assert len({p.sku for p in model.products}) == 320
    for category in model.categories:
        titles = [p.title for p in category.products]
        assert len(set(titles)) == len(titles)  # numbered editions past the combinations
        assert all(t == " ".join(t.split()) for t in titles)
        assert model.page_count(category.slug) == 6
        assert len(model.listing(category.slug, 6)) == 5
    for p in model.products:
        assert re.fullmatch(r"[0-9a-f]{16}", p.sku)
        assert p.price > 0
        assert p.price == round(p.price, 2) == float(f"{p.price:.2f}")
        assert p.stock >= 0
        assert p.rating in RATINGS
        assert p.currency == "GBP"
    items = model.expected_items()
    assert {tuple(i) for i in items} == {("sku", "title", "price", "stock", "rating", "category")}


@pytest.mark.parametrize(
    "kwargs",
    [{"categories": 0}, {"categories": 9}, {"products_per_category": 0}, {"page_size": 0}],
)
def test_model_rejects_impossible_shapes(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ShopModel(**kwargs)


# ------------------------------------------------------------------------------------ pages


def test_home_links_categories_and_traps(site: DemoSite) -> None:
    home = get(site.url)
    assert home.status == 200
    assert home.content_type == "text/html; charset=utf-8"
    hrefs = {unescape(h.decode()) for h in HREF.findall(home.body)}
    categories = {category_path(c.slug) for c in site.model.categories}
    assert categories <= hrefs
    assert {ADMIN_PATH, OFFSITE_URL, *BROKEN_PATHS, *NON_HTTP_LINKS} <= hrefs
    assert "Pâtisserie" in home.text


def test_listing_page_markup(site: DemoSite) -> None:
    slug = site.model.categories[0].slug
    page = get(site.url_for(listing_variants(slug, 2)[0]))
    assert page.status == 200
    tree = LexborHTMLParser(page.text)
    products = site.model.listing(slug, 2)
    cards = tree.css("article.product_pod h3 a")
    assert [a.attributes["href"] for a in cards] == [
        f"../../product/{p.sku}.html" for p in products
    ]
    reviews = [a.attributes["href"] for a in tree.css("a.reviews")]
    assert reviews == [f"{product_path(p.sku)}#reviews" for p in products]
    next_link = tree.css_first("a[rel=next]")
    assert next_link is not None
    assert next_link.attributes["href"] == "?page=3&view=grid"
    numbered = [a.attributes["href"] for a in tree.css("ul.pager li:not(.next):not(.previous) a")]
    assert numbered == [listing_variants(slug, n)[1] for n in (1, 2, 3)]


def test_product_page_markup(site: DemoSite) -> None:
    product = site.model.products[0]
    page = get(site.url_for(product_path(product.sku)))
    assert page.status == 200
    article = LexborHTMLParser(page.text).css_first("article.product_page")
    assert article is not None

    def text(selector: str) -> str:
        node = article.css_first(selector)
        assert node is not None, selector
        return node.text()

    assert text("h1").strip() == product.title
    assert text("p.price") == f"£{product.price:.2f}"
    assert text("[itemprop=sku]") == product.sku
    assert text("[itemprop=category]") == product.category
    assert f"({product.stock} available)" in text("p.availability")
    rating = article.css_first("p.star-rating")
    assert rating is not None
    assert rating.attributes["class"] == f"star-rating {product.rating.capitalize()}"


def test_robots_txt(site: DemoSite) -> None:
    robots = get(site.url_for("/robots.txt"))
    assert robots.status == 200
    assert robots.content_type.startswith("text/plain")
    assert robots.body.decode() == ROBOTS_TXT
    assert "User-agent: *\nDisallow: /admin/\n" in ROBOTS_TXT
    assert get(site.url_for(ADMIN_PATH)).status == 200  # only robots.txt keeps crawlers out


@pytest.mark.parametrize(
    "path",
    [
        *BROKEN_PATHS,
        "/category/bakery/?page=0",
        "/category/bakery/?page=4",
        "/category/bakery/?page=two",
        "/category/bakery",
        "/admin/other",
        "/calendar/2024-13/",
    ],
)
def test_not_found(site: DemoSite, path: str) -> None:
    page = get(site.url_for(path))
    assert page.status == 404
    assert "Page not found" in page.text


def test_calendar_trap_is_endless(site: DemoSite) -> None:
    page = get(site.url_for("/calendar/2024-12/"))
    assert page.status == 200
    assert b'href="/calendar/2025-01/"' in page.body
    assert b'href="/calendar/2024-11/"' in page.body


def test_head_has_no_body(site: DemoSite) -> None:
    page = get(site.url, method="HEAD")
    assert page.status == 200
    assert page.body == b""


# ------------------------------------------------------------------------------------ hazards


def test_encodings_are_what_header_or_meta_say(site: DemoSite) -> None:
    by_charset = {c.charset: c for c in site.model.categories}
    latin = by_charset["iso-8859-1"]
    page = get(site.url_for(product_path(latin.products[0].sku)))
    assert page.header_charset == "iso-8859-1"
    assert page.meta_charset is None
    assert latin.products[0].title in page.body.decode("iso-8859-1")
    with pytest.raises(UnicodeDecodeError):
        page.body.decode("utf-8")

    windows = by_charset["windows-1252"]
    listing = get(site.url_for(category_path(windows.slug)))
    assert listing.content_type == "text/html"
    assert listing.meta_charset == "windows-1252"
    text = listing.body.decode("windows-1252")
    titles = [p.title for p in site.model.listing(windows.slug, 1)]
    assert all(title in text for title in titles)
    # œ and U+2019 are windows-1252 only: reading the page as Latin-1 gets them wrong.
    assert any(set(title) & {"œ", "Œ", "\u2019"} for title in titles)
    assert not all(title in listing.body.decode("iso-8859-1") for title in titles)

    utf8 = get(site.url_for(category_path(by_charset["utf-8"].slug)))
    assert (utf8.header_charset, utf8.meta_charset) == ("utf-8", "utf-8")


def test_accented_titles_exist() -> None:
    titles = {p.title for p in ShopModel().products}
    assert any(t.startswith("Crème brûlée") for t in titles)


def test_query_order_variants_render_the_same(site: DemoSite) -> None:
    slug = site.model.categories[1].slug
    for number in (1, 2, 3):
        page_first, view_first = listing_variants(slug, number)
        a, b = get(site.url_for(page_first)), get(site.url_for(view_first))
        assert a.status == b.status == 200
        assert a.body == b.body
        assert get(site.url_for(f"{category_path(slug)}?page={number}")).body == a.body
    first_page = listing_variants(slug, 1)[0]
    assert get(site.url_for(category_path(slug))).body == get(site.url_for(first_page)).body


def test_flaky_page_fails_twice_then_recovers() -> None:
    with DemoSite(slow_delay=0) as flaky:
        url = flaky.url_for(flaky.flaky_path)
        assert [get(url).status for _ in range(4)] == [500] * FLAKY_FAILURES + [200, 200]
        flaky.reset()
        assert get(url).status == 500
        assert [e.status for e in flaky.log.entries()] == [500]
    with DemoSite(flaky=False, slow_delay=0) as steady:
        assert get(steady.url_for(steady.flaky_path)).status == 200


def test_slow_page_takes_its_delay() -> None:
    with DemoSite(slow_delay=0.2, flaky=False) as slow:
        started = time.monotonic()
        assert get(slow.url_for(slow.slow_path)).status == 200
        assert time.monotonic() - started >= 0.2
        started = time.monotonic()
        assert get(slow.url).status == 200
        assert time.monotonic() - started < 0.2
        [entry, _] = slow.log.entries()
        assert entry.elapsed >= 0.2


# -------------------------------------------------------------------------- crawl of the site


def canonical(url: str) -> str:
    """Fragment dropped, query keys sorted: the variants the site links become one URL."""
    parts = urlsplit(url)
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, ""))


def crawl(site: DemoSite) -> dict[str, Response]:
    """A tiny BFS crawler: same host, robots-disallowed and calendar links skipped."""
    origin = urlsplit(site.url).netloc
    start = canonical(site.url)
    seen, queue, pages = {start}, deque([start]), {}
    while queue:
        url = queue.popleft()
        pages[url] = page = get(url)
        if page.status != 200:
            continue
        for raw in HREF.findall(page.body):
            link = canonical(urljoin(url, unescape(raw.decode("ascii"))))
            parts = urlsplit(link)
            if parts.scheme != "http" or parts.netloc != origin:
                continue
            if parts.path.startswith(("/admin/", "/calendar/")) or link in seen:
                continue
            seen.add(link)
            queue.append(link)
    return pages


def test_crawl_reaches_every_product_and_nothing_forbidden() -> None:
    model = ShopModel()
    with DemoSite(model, flaky=False, slow_delay=0) as shop:
        pages = crawl(shop)
        products = {u: p for u, p in pages.items() if PRODUCT_PATTERN.search(u)}
        ok = {u for u, p in products.items() if p.status == 200}
        assert len(ok) == len(model.products)
        assert {u.rsplit("/", 1)[1].removesuffix(".html") for u in ok} == {
            p.sku for p in model.products
        }
        failed = {urlsplit(u).path for u, p in pages.items() if p.status != 200}
        assert failed == set(BROKEN_PATHS)
        counts = shop.log.counts()
        assert ADMIN_PATH not in counts
        assert not any(path.startswith("/calendar/") for path in counts)
        # Canonical URLs: each listing page once, although the site links it several ways.
        listings = {t for t in shop.log.target_counts() if t.startswith("/category/")}
        pages_total = sum(model.page_count(c.slug) for c in model.categories)
        # Per category the bare path and page=N&view=grid per page; and /category/discontinued/.
        assert len(listings) == pages_total + len(model.categories) + 1


def extract(task: CrawlTask, url: str, page: Response) -> list[dict[str, Any]]:
    """The pipeline's extract rules, applied as FieldRule and ExtractRule document them."""
    items = []
    tree = LexborHTMLParser(page.text)
    for rule in task.extract:
        if rule.match is not None and not re.search(rule.match, url):
            continue
        assert rule.container is not None  # the demo pipeline uses one
        scopes = tree.css(rule.container)
        for scope in scopes:
            item: dict[str, Any] = {}
            for name, field in rule.fields.items():
                assert field.selector is not None
                node = scope.css_first(field.selector)
                if node is None:
                    value = None
                elif field.get == "attr":
                    assert field.attr is not None
                    value = node.attributes.get(field.attr)
                else:
                    value = " ".join(node.text().split())
                if value is not None and field.regex is not None:
                    found = re.search(field.regex, value)
                    value = found[1] if found else None
                assert value is not None or not field.required, (url, name)
                item[name] = int(value) if value is not None and field.type == "int" else value
            items.append(item)
    return items


def transform(task: TransformTask, item: dict[str, Any]) -> dict[str, Any]:
    for op in task.operations:
        data = op.model_dump()
        kind = data["op"]
        if kind == "strip":
            item |= {f: " ".join(item[f].split()) for f in data["fields"]}
        elif kind == "rename":
            item = {data["fields"].get(k, k): v for k, v in item.items()}
        elif kind == "to_number":
            item |= {f: float(item[f]) for f in data["fields"]}
        elif kind == "lower":
            item |= {f: item[f].lower() for f in data["fields"]}
        elif kind == "keep":
            item = {k: v for k, v in item.items() if k in data["fields"]}
        else:
            raise AssertionError(f"the test does not model op {kind}")
    return item


def test_pipeline_turns_the_site_into_the_expected_items() -> None:
    pipeline = load_pipeline(PIPELINE)
    crawl_task, clean = pipeline.task("crawl_shop"), pipeline.task("clean_products")
    assert isinstance(crawl_task, CrawlTask)
    assert isinstance(clean, TransformTask)
    assert crawl_task.seeds == [f"http://127.0.0.1:{DEMO_PORT}/"]
    model = ShopModel()
    with DemoSite(model, flaky=False, slow_delay=0) as shop:
        pages = crawl(shop)
    items = [
        transform(clean, item)
        for url, page in pages.items()
        if page.status == 200
        for item in extract(crawl_task, url, page)
    ]
    expected: list[dict[str, Any]] = [dict(i) for i in model.expected_items()]
    assert sorted(items, key=lambda i: i["sku"]) == sorted(expected, key=lambda i: i["sku"])
    # Every value survives a JSON round trip unchanged (what the JSONL export does).
    assert json.loads(json.dumps(items)) == items


# --------------------------------------------------------------------------- serving, the log


def test_request_log_records_every_request() -> None:
    with DemoSite(flaky=False, slow_delay=0) as shop:
        get(shop.url)
        get(shop.url_for("/nope"))
        get(shop.url_for(listing_variants("bakery", 2)[1]))
        first, missing, listing = shop.log.entries()
        assert (first.method, first.target, first.status) == ("GET", "/", 200)
        assert first.user_agent is not None
        assert first.user_agent.startswith("Python-urllib/")
        assert (missing.target, missing.status) == ("/nope", 404)
        assert (listing.path, listing.query) == ("/category/bakery/", "view=grid&page=2")
        assert first.time <= missing.time <= listing.time
        assert shop.log.hits("/category/bakery/") == 1
        assert shop.log.counts() == {"/": 1, "/nope": 1, "/category/bakery/": 1}

        # Many threads at once: nothing lost, and fast enough for a crawl engine's tests.
        urls = [shop.url_for(product_path(p.sku)) for p in shop.model.products]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda u: get(u).status, urls))
        # Client and server share this process; >= 100 requests/s even on a loaded runner.
        assert time.monotonic() - started < len(urls) / 100
        assert statuses == [200] * len(urls)
        assert len(shop.log) == 3 + len(urls)
        shop.log.clear()
        assert shop.log.entries() == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_given_port_and_lifecycle() -> None:
    port = free_port()
    shop = DemoSite(port=port)
    with pytest.raises(RuntimeError, match="not running"):
        _ = shop.url
    with shop:
        assert shop.url == f"http://127.0.0.1:{port}/"
        assert shop.running
        with pytest.raises(RuntimeError, match="already running"):
            shop.start()
    assert not shop.running
    shop.stop()  # idempotent
    with shop:  # restartable, same port
        assert get(shop.url).status == 200
    assert DEMO_PORT == 8765


def test_rejects_negative_delay() -> None:
    with pytest.raises(ValueError, match="slow_delay"):
        DemoSite(slow_delay=-1)


def test_stop_hangs_up_on_kept_alive_connections() -> None:
    shop = DemoSite().start()
    connection = http.client.HTTPConnection("127.0.0.1", shop.port, timeout=5)
    connection.request("GET", "/robots.txt")
    assert connection.getresponse().read() == ROBOTS_TXT.encode()  # HTTP/1.1: kept alive
    started = time.monotonic()
    shop.stop()
    assert time.monotonic() - started < 1

    def ask_again() -> None:
        connection.request("GET", "/robots.txt")
        connection.getresponse()

    with pytest.raises((ConnectionError, http.client.HTTPException)):
        ask_again()
    connection.close()
    assert len(shop.log) == 1
