"""A small shop on 127.0.0.1 whose products are described by structured data, not by markup.

- ``/`` links to every product page (one link through a redirect, ``/go/lamp`` -> ``/p/lamp``);
- ``/p/lamp``: two JSON-LD scripts (a Product; an ``@graph`` of an Organization and a
  BreadcrumbList), a third script that is not JSON, OpenGraph meta tags, and a microdata
  Product (its review);
- ``/p/chair``: one JSON-LD script holding a list (two Products: the chair and its cushion,
  offers as a list), served gzip-encoded (``Content-Encoding: gzip``);
- ``/p/table``: microdata only (a Product with a nested Offer and an ``itemref``), and
  OpenGraph.

:data:`EXPECTED_PRODUCTS` are the items a ``structured: jsonld, itemtype: Product`` rule with
the fields of :func:`product_rule` makes of them. Every request is logged by path.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["EXPECTED_PRODUCTS", "PAGES", "StructuredSite", "product_rule", "structured_site"]


def _ld(data: Any) -> str:
    return f'<script type="application/ld+json">{json.dumps(data)}</script>'


_LAMP = {
    "@context": "https://schema.org",
    "@type": "Product",
    "name": "Brass lamp",
    "sku": "L-1",
    "image": ["/img/lamp-1.jpg", "/img/lamp-2.jpg"],
    "offers": {"@type": "Offer", "price": "49.90", "priceCurrency": "EUR"},
}
_GRAPH = {
    "@context": "https://schema.org",
    "@graph": [
        {"@type": "Organization", "@id": "#org", "name": "Lamps & Chairs Ltd"},
        {
            "@type": "BreadcrumbList",
            "itemListElement": [
                {"@type": "ListItem", "position": 1, "name": "Lighting"},
                {"@type": "ListItem", "position": 2, "name": "Brass lamp"},
            ],
        },
    ],
}
_CHAIR = [
    {
        "@context": "https://schema.org",
        "@type": ["Product", "IndividualProduct"],
        "name": "Oak chair",
        "sku": "C-7",
        "offers": [
            {"@type": "Offer", "price": 120, "priceCurrency": "EUR"},
            {"@type": "Offer", "price": 99.5, "priceCurrency": "EUR"},
        ],
    },
    {
        "@context": "https://schema.org",
        "@type": "Product",
        "name": "Seat cushion",
        "sku": "C-8",
        "offers": {"@type": "Offer", "price": 15, "priceCurrency": "EUR"},
    },
]

PAGES: dict[str, str] = {
    "/": (
        "<html><head><title>Shop</title></head><body>"
        '<a href="/go/lamp">lamp</a> <a href="/p/chair">chair</a> <a href="/p/table">table</a>'
        "</body></html>"
    ),
    "/p/lamp": (
        '<html prefix="og: http://ogp.me/ns#"><head><title>Brass lamp</title>'
        '<meta property="og:type" content="product">'
        '<meta property="og:title" content="Brass lamp, 40 cm">'
        '<meta property="og:image" content="https://cdn.example.com/lamp-1.jpg">'
        '<meta property="og:image" content="https://cdn.example.com/lamp-2.jpg">'
        '<meta property="product:price:amount" content="49.90">'
        f"{_ld(_LAMP)}{_ld(_GRAPH)}"
        '<script type="application/ld+json">{"@type": "Product", "name": </script>'
        "</head><body><h1>Brass lamp</h1>"
        '<div itemscope itemtype="https://schema.org/Review">'
        '<span itemprop="author">Ada</span>'
        '<div itemprop="reviewRating" itemscope itemtype="https://schema.org/Rating">'
        '<meta itemprop="ratingValue" content="5"></div></div>'
        "</body></html>"
    ),
    "/p/chair": (
        '<html><head><title>Oak chair</title><meta property="og:title" content="Oak chair">'
        f"{_ld(_CHAIR)}</head><body><h1>Oak chair</h1></body></html>"
    ),
    "/p/table": (
        '<html><head><title>Table</title><meta property="og:type" content="product">'
        '<meta property="og:title" content="Walnut table"></head><body>'
        '<div itemscope itemtype="http://schema.org/Product" itemid="urn:sku:T-3" '
        'itemref="maker">'
        '<h1 itemprop="name">Walnut table</h1>'
        '<img itemprop="image" src="/img/table.jpg">'
        '<div itemprop="offers" itemscope itemtype="http://schema.org/Offer">'
        '<meta itemprop="priceCurrency" content="EUR">'
        '<span itemprop="price" content="310.00">310,00 €</span></div>'
        '<span itemprop="color">walnut</span> <span itemprop="color">black</span></div>'
        '<p id="maker">by <span itemprop="brand">Tischler</span></p>'
        "</body></html>"
    ),
}


def product_rule() -> dict[str, Any]:
    """One item per JSON-LD Product: name (required), sku, first price, currency."""
    return {
        "name": "product",
        "structured": "jsonld",
        "itemtype": "Product",
        "fields": {
            "name": {"path": "name", "required": True},
            "sku": "sku",
            "price": {"path": "[offers][].price", "type": "float"},
            "currency": "[offers][].priceCurrency",
        },
    }


#: What :func:`product_rule` makes of the site (without stepcrawl's ``_`` fields): the lamp
#: (reached through a redirect; its broken third script skipped), the chair and its cushion
#: (one script holding a list); the table has no JSON-LD.
EXPECTED_PRODUCTS: list[dict[str, Any]] = [
    {"name": "Brass lamp", "sku": "L-1", "price": 49.9, "currency": "EUR"},
    {"name": "Oak chair", "sku": "C-7", "price": 120.0, "currency": "EUR"},
    {"name": "Seat cushion", "sku": "C-8", "price": 15.0, "currency": "EUR"},
]
#: Served gzip-encoded.
GZIPPED = frozenset({"/p/chair"})


@dataclass
class StructuredSite:
    base: str
    requests: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


@contextmanager
def structured_site() -> Iterator[StructuredSite]:
    site: StructuredSite

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            site.requests.append(self.path)
            if self.path == "/go/lamp":
                self.send_response(301)
                self.send_header("Location", "/p/lamp")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path not in PAGES:
                body = b"not found"
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            body = PAGES[self.path].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("X-Shop", "structured")
            if self.path in GZIPPED:
                body = gzip.compress(body, mtime=0)
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    site = StructuredSite(base=f"http://127.0.0.1:{server.server_address[1]}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
