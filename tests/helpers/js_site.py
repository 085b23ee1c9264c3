"""A small shop on 127.0.0.1 whose products (and the link to its second page) are written by
JavaScript: a plain fetch sees empty lists, a browser sees everything.

- ``/`` and ``/page/2``: an empty ``<ul class="products">`` and ``/app.js``, which fetches
  ``/api/products?page=N`` (answered after :attr:`JsSite.api_delay` seconds, so the load event
  comes before the products) and writes one ``<li>`` per product, plus, on page 1, the
  ``a.next`` link to page 2;
- ``/never``: a page whose script never writes anything (a ``wait_for`` that never matches);
- ``/leaky``: a page whose script asks the cloud metadata address and another loopback
  address (``127.0.0.2``), and shows an image (never loaded by the browser fetcher);
- ``/robots.txt`` disallows ``/private/``; ``/private/page`` would render a product.

:data:`EXPECTED` are the products of pages 1 and 2. Every request is logged by path.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stepcrawl.demo.loopback import serve_loopback

__all__ = ["EXPECTED", "PRODUCTS", "JsSite", "js_pipeline", "js_site"]

PRODUCTS: dict[int, list[dict[str, Any]]] = {
    1: [
        {"name": "Brass lamp", "price": 49.9},
        {"name": "Oak chair", "price": 120.0},
        {"name": "Linen curtain", "price": 35.5},
    ],
    2: [
        {"name": "Wool rug", "price": 210.0},
        {"name": "Glass vase", "price": 18.25},
    ],
}
EXPECTED = sorted((p["name"], p["price"]) for page in PRODUCTS.values() for p in page)

_PAGE = """<!doctype html><html><head><title>Shop page {page}</title></head>
<body><h1>Shop</h1><ul class="products"></ul><nav></nav>
<script>window.SHOP_PAGE = {page};</script><script src="/app.js"></script></body></html>"""

_APP = """
fetch('/api/products?page=' + window.SHOP_PAGE).then(r => r.json()).then(data => {
  const list = document.querySelector('ul.products');
  for (const p of data.products) {
    const li = document.createElement('li');
    li.innerHTML = '<h3></h3><span class="price"></span>';
    li.querySelector('h3').textContent = p.name;
    li.querySelector('.price').textContent = p.price.toFixed(2) + ' EUR';
    list.appendChild(li);
  }
  if (data.next) {
    const a = document.createElement('a');
    a.className = 'next'; a.href = data.next; a.textContent = 'next';
    document.querySelector('nav').appendChild(a);
  }
});
"""

_NEVER = """<!doctype html><html><body><ul class="products"></ul>
<script>setInterval(() => {}, 1000);</script></body></html>"""

_LEAKY = """<!doctype html><html><body><ul class="products"></ul><img src="/logo.png">
<script src="http://169.254.169.254/latest/meta-data/x.js"></script>
<script>
function mark(name) {{
  const p = document.createElement('p'); p.className = name; document.body.appendChild(p);
}}
fetch('http://127.0.0.2:{port}/secret').then(() => mark('leaked')).catch(() => mark('blocked'));
</script></body></html>"""


@dataclass
class JsSite:
    """The served site: its base URL and the paths requested, in order."""

    base: str = ""
    port: int = 0
    api_delay: float = 0.3
    hits: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hits_of(self, path: str) -> int:
        with self.lock:
            return sum(1 for hit in self.hits if hit == path)


def _handler(site: JsSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _send(self, status: int, body: str, content_type: str = "text/html") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", f"{content_type}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            with site.lock:
                site.hits.append(parts.path)
            if parts.path == "/":
                self._send(200, _PAGE.format(page=1))
            elif parts.path == "/page/2":
                self._send(200, _PAGE.format(page=2))
            elif parts.path == "/private/page":
                self._send(200, _PAGE.format(page=1))
            elif parts.path == "/app.js":
                self._send(200, _APP, "application/javascript")
            elif parts.path == "/api/products":
                page = int(parse_qs(parts.query).get("page", ["1"])[0])
                time.sleep(site.api_delay)
                answer = {
                    "products": PRODUCTS.get(page, []),
                    "next": "/page/2" if page == 1 else None,
                }
                self._send(200, json.dumps(answer), "application/json")
            elif parts.path == "/never":
                self._send(200, _NEVER)
            elif parts.path == "/leaky":
                self._send(200, _LEAKY.format(port=site.port))
            elif parts.path == "/robots.txt":
                self._send(200, "User-agent: *\nDisallow: /private/\n", "text/plain")
            else:
                self._send(404, "not found", "text/plain")

    return Handler


@contextmanager
def js_site(api_delay: float = 0.3) -> Iterator[JsSite]:
    site = JsSite(api_delay=api_delay)
    with serve_loopback(_handler(site), "js-site") as port:
        site.port = port
        site.base = f"http://127.0.0.1:{port}"
        yield site


def js_pipeline(site: JsSite, *, render: bool, name: str = "js-shop") -> str:
    """The pipeline of the shop: the same with and without ``render: browser``.

    Rendered, a page is read once its products are in the DOM (``wait_for``), a second or
    so; its budget only ends a page that never gets them, so it is generous: a page loaded by
    a Chromium on a busy box must not end ``render_timeout`` for being slow."""
    rendering = "    render: browser\n    wait_for: 'ul.products li'\n    render_timeout: 60s\n"
    return f"""name: {name}
defaults:
  politeness: {{delay: 0s}}
tasks:
  - id: shop
    type: crawl
    seeds: ['{site.base}/']
    allow_private_network: true
{rendering if render else ""}    follow:
      - selector: 'a.next[href]'
    extract:
      - name: product
        container: 'ul.products li'
        fields:
          name: {{selector: h3, required: true}}
          price: {{selector: .price, regex: '([\\d.]+)', type: float}}
"""
