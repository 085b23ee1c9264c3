"""parse_page: a fetched page end to end, as the parse Lambda calls it."""

from __future__ import annotations

from typing import Any

from stepcrawl.extract import ParsedPage, default_allowed_domains, parse_page
from stepcrawl.extract.items import RuleMatch
from stepcrawl.pipeline.crawl_task import CrawlTask

BOOK_URL = "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html"
LISTING_URL = "https://books.toscrape.com/catalogue/page-2.html"

# The crawl task of pipelines/books.yaml, plus a listing rule, tags and a date. The book rule has
# no container: the breadcrumb (category) sits outside article.product_page on the real site.
BOOKS: dict[str, Any] = {
    "id": "crawl_books",
    "seeds": ["https://books.toscrape.com/"],
    "follow": [
        {"selector": "ul.nav-list a[href]"},
        {"selector": "li.next a[href]"},
        {
            "selector": "article.product_pod h3 a[href]",
            "allow": [r"/catalogue/[^/]+_\d+/index\.html$"],
        },
    ],
    "extract": [
        {
            "name": "book",
            "match": r"/catalogue/[^/]+_\d+/index\.html$",
            "fields": {
                "title": {"selector": "h1", "required": True},
                "price": {
                    "selector": "p.price_color",
                    "regex": r"([\d.]+)",
                    "type": "float",
                    "required": True,
                },
                "availability": {"selector": "p.availability"},
                "stock": {
                    "selector": "p.availability",
                    "regex": r"(\d+) available",
                    "type": "int",
                    "default": 0,
                },
                "rating": {
                    "selector": "p.star-rating",
                    "get": "attr",
                    "attr": "class",
                    "regex": r"star-rating (\w+)",
                },
                "upc": {"selector": "table.table-striped tr:nth-child(1) td", "required": True},
                "image": {"selector": "div.item.active img", "get": "attr", "attr": "src"},
                "category": {"selector": "ul.breadcrumb li:nth-child(3) a"},
                "tags": {"selector": "ul.tags li", "multiple": True},
                "added": {"selector": "time", "get": "attr", "attr": "datetime", "type": "date"},
                "in_stock": {"selector": "p.availability", "regex": r"(In stock)", "type": "bool"},
            },
        },
        {
            "name": "listing",
            "match": r"/page-\d+\.html$",
            "container": "article.product_pod",
            "fields": {
                "title": {"selector": "h3 a", "get": "attr", "attr": "title", "required": True},
                "url": {"selector": "h3 a", "get": "attr", "attr": "href"},
                "price": {"selector": "p.price_color", "type": "float"},
            },
        },
    ],
}

BOOK_PAGE = """<!DOCTYPE html>
<html lang="en-us">
<head>
  <meta charset="utf-8">
  <title>
    A Light in the Attic | Books to Scrape - Sandbox
  </title>
  <base href="/catalogue/a-light-in-the-attic_1000/">
</head>
<body>
  <ul class="breadcrumb">
    <li><a href="../../index.html">Home</a></li>
    <li><a href="../category/books_1/index.html">Books</a></li>
    <li><a href="../category/books/poetry_23/index.html">Poetry</a></li>
    <li class="active">A Light in the Attic</li>
  </ul>
  <div class="side_categories"><ul class="nav-list">
    <li><a href="../category/books/travel_2/index.html#top">Travel</a></li>
    <li><a href="../category/books/poetry_23/index.html">Poetry</a></li>
    <li><a href="https://elsewhere.example.org/">Partner</a></li>
    <li><a href="javascript:void(0)">Menu</a></li>
  </ul></div>
  <article class="product_page">
    <div class="item active"><img src="../../media/cache/fe/72/fe72f0532301ec28892ae79a629a293c.jpg"
      alt="A Light in the Attic"></div>
    <h1>A Light in the Attic</h1>
    <p class="price_color">\u00a351.77</p>
    <p class="instock availability">
        <i class="icon-ok"></i>
        In stock (22 available)
    </p>
    <p class="star-rating Three"><i class="icon-star"></i></p>
    <time datetime="2016-03-01T10:00:00Z">March 2016</time>
    <ul class="tags"><li>poetry</li><li> children </li></ul>
    <table class="table table-striped">
      <tr><th>UPC</th><td>a897fe39b1053632</td></tr>
      <tr><th>Product Type</th><td>Books</td></tr>
    </table>
  </article>
</body>
</html>
"""

LISTING_PAGE = """<html><head><title>All products | Books to Scrape</title></head><body>
<ol class="row">
  <li><article class="product_pod">
    <h3><a href="a-light-in-the-attic_1000/index.html"
           title="A Light in the Attic">A Light...</a></h3>
    <p class="price_color">\u00a351.77</p>
  </article></li>
  <li><article class="product_pod">
    <h3><a href="tipping-the-velvet_999/index.html" title="Tipping the Velvet">Tipping...</a></h3>
    <p class="price_color">\u00a353,74</p>
  </article></li>
  <li><article class="product_pod">
    <h3><a href="soumission_998/index.html?b=2&amp;a=1">Soumission</a></h3>
    <p class="price_color">\u00a350.10</p>
  </article></li>
  <li><article class="product_pod">
    <h3><a href="a-light-in-the-attic_1000/index.html#reviews" title="Again">Again</a></h3>
    <p class="price_color">free</p>
  </article></li>
</ol>
<ul class="pager"><li class="next"><a href="page-3.html">next</a></li></ul>
</body></html>
"""


def task(**changes: Any) -> CrawlTask:
    return CrawlTask.model_validate(BOOKS | changes)


def test_product_page() -> None:
    page = parse_page(BOOK_PAGE.encode(), "text/html", BOOK_URL, task())
    assert page.items == [
        {
            "_kind": "book",
            "title": "A Light in the Attic",
            "price": 51.77,
            "availability": "In stock (22 available)",
            "stock": 22,
            "rating": "Three",
            "upc": "a897fe39b1053632",
            "image": "https://books.toscrape.com/media/cache/fe/72/fe72f0532301ec28892ae79a629a293c.jpg",
            "category": "Poetry",
            "tags": ["poetry", "children"],
            "added": "2016-03-01",
            "in_stock": None,
        }
    ]
    assert page.problems == ["book.in_stock: 'In stock' is not a valid bool: " + _BOOL_REASON]
    assert page.dropped == 0
    assert page.links == [
        "https://books.toscrape.com/catalogue/category/books/travel_2/index.html",
        "https://books.toscrape.com/catalogue/category/books/poetry_23/index.html",
    ]
    assert (page.title, page.encoding) == (
        "A Light in the Attic | Books to Scrape - Sandbox",
        "utf-8",
    )


_BOOL_REASON = "not a boolean (true/false, yes/no, 1/0)"


def test_listing_page() -> None:
    page = parse_page(LISTING_PAGE.encode(), "text/html; charset=utf-8", LISTING_URL, task())
    assert page.items == [
        {
            "_kind": "listing",
            "title": "A Light in the Attic",
            "url": "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html",
            "price": 51.77,
        },
        {
            "_kind": "listing",
            "title": "Tipping the Velvet",
            "url": "https://books.toscrape.com/catalogue/tipping-the-velvet_999/index.html",
            "price": 53.74,
        },
        {
            "_kind": "listing",
            "title": "Again",
            "url": "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html#reviews",
            "price": None,
        },
    ]
    assert page.dropped == 1  # Soumission has no title attribute
    assert page.problems == ["listing.price: 'free' is not a valid float: not a number"]
    # Document order, canonical, de-duplicated: the fragment variant is the first book again;
    # soumission's query string fails the allow pattern, which ends at index.html.
    assert page.links == [
        "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html",
        "https://books.toscrape.com/catalogue/tipping-the-velvet_999/index.html",
        "https://books.toscrape.com/catalogue/page-3.html",
    ]
    assert page.title == "All products | Books to Scrape"


def test_a_page_no_rule_matches_still_gives_links_and_title() -> None:
    page = parse_page(BOOK_PAGE.encode(), None, "https://books.toscrape.com/index.html", task())
    assert page.items == []
    assert page.links
    assert page.title == "A Light in the Attic | Books to Scrape - Sandbox"


def test_allowed_domains_default_to_the_seed_hosts() -> None:
    body = (
        b'<a href="https://books.toscrape.com/a">1</a><a href="https://cdn.books.toscrape.com/b">2</a>'
        b'<a href="https://toscrape.com/c">3</a><a href="https://quotes.example.org/d">4</a>'
    )
    no_follow_rules = task(follow=[{}], extract=[])
    page = parse_page(body, None, "https://books.toscrape.com/", no_follow_rules)
    assert page.links == ["https://books.toscrape.com/a", "https://cdn.books.toscrape.com/b"]

    explicit = task(follow=[{}], extract=[], allowed_domains=["toscrape.com"])
    page = parse_page(body, None, "https://books.toscrape.com/", explicit)
    assert page.links == [
        "https://books.toscrape.com/a",
        "https://cdn.books.toscrape.com/b",
        "https://toscrape.com/c",
    ]

    page = parse_page(
        body, None, "https://books.toscrape.com/", explicit, allowed_domains=["example.org"]
    )
    assert page.links == ["https://quotes.example.org/d"]


def test_default_allowed_domains() -> None:
    seeds = ["https://A.example.com/x", "http://a.example.com:8080/", "https://b.example.org/"]
    assert default_allowed_domains(task(seeds=seeds)) == ("a.example.com", "b.example.org")
    assert default_allowed_domains(task(allowed_domains=["c.net"])) == ["c.net"]
    upstream = task(seeds=[], seed_field="url", depends_on=["find"], allowed_domains=["d.io"])
    assert tuple(default_allowed_domains(upstream)) == ("d.io",)


def test_latin1_page_from_the_header() -> None:
    body = "<title>Caf\u00e9 \u2014 Men\u00fc</title><h1>Cr\u00e8me br\u00fbl\u00e9e</h1>".encode(
        "cp1252"
    )
    rule = {"name": "dish", "fields": {"name": "h1"}}
    page = parse_page(body, "text/html; charset=iso-8859-1", BOOK_URL, task(extract=[rule]))
    assert page.encoding == "cp1252"
    assert page.title == "Caf\u00e9 \u2014 Men\u00fc"
    assert page.items == [{"_kind": "dish", "name": "Cr\u00e8me br\u00fbl\u00e9e"}]


def test_broken_and_empty_bodies_do_not_raise() -> None:
    broken = b"<html><title>x\xff\xfe</title><a href='http://[::1'>a</a><h1>\x00\xc3"
    page = parse_page(broken, "text/html; charset=utf-8", BOOK_URL, task())
    assert page.title == "x\ufffd\ufffd"
    assert page.links == []
    empty = parse_page(b"", None, BOOK_URL, task())
    assert empty == ParsedPage(
        items=[],
        links=[],
        dropped=1,
        problems=[],
        encoding="utf-8",
        title=None,
        matched={"book": RuleMatch(items=0, found=set())},  # it applied, and matched nothing
        links_per_rule=(0,) * len(task().follow),
    )


def test_no_title_is_none() -> None:
    assert parse_page(b"<p>x</p>", None, BOOK_URL, task()).title is None
    assert parse_page(b"<title>  </title>", None, BOOK_URL, task()).title is None


def test_title_is_the_documents_not_an_svg_one() -> None:
    body = b"<body><svg><title>icon</title></svg></body>"
    assert parse_page(body, None, BOOK_URL, task()).title is None
    body = b"<head><title>Page</title></head><body><svg><title>icon</title></svg></body>"
    assert parse_page(body, None, BOOK_URL, task()).title == "Page"
