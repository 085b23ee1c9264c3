"""A small shop on 127.0.0.1 for the WARC archive tests: a home page linking to three product
pages (one sent gzip-encoded, one with a non-ASCII title) and one missing page (404).

Every request is counted by path, so a test can tell that a replay fetched nothing.
"""

from __future__ import annotations

import gzip
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["PRODUCTS", "ArchiveSite", "archive_site"]

#: Product path -> (name, price, sku).
PRODUCTS: dict[str, tuple[str, str, str]] = {
    "/p/1": ("Teapot", "12.50", "TP-1"),
    "/p/2": ("Crème brûlée torch", "30.00", "CB-2"),
    "/p/3": ("Kettle", "45.00", "KT-3"),
}
GZIPPED = "/p/3"


def _page(path: str) -> bytes:
    name, price, sku = PRODUCTS[path]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{name}</title></head><body>"
        f"<h1>{name}</h1><span class='price'>{price}</span><span class='sku'>{sku}</span>"
        "<a href='/'>home</a></body></html>"
    ).encode()


_HOME = (
    "<!doctype html><html><body><h1>Shop</h1>"
    + "".join(f"<a href='{p}'>{p}</a>" for p in PRODUCTS)
    + "<a href='/missing'>gone</a></body></html>"
).encode()


@dataclass
class ArchiveSite:
    base: str
    requests: Counter[str] = field(default_factory=Counter)


@contextmanager
def archive_site() -> Iterator[ArchiveSite]:
    """Serve the shop until the block ends (a test may also call ``stop`` on it earlier)."""
    site = ArchiveSite(base="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            site.requests[self.path] += 1
            headers = {"Content-Type": "text/html; charset=utf-8", "X-Shop": "archive-test"}
            if self.path == "/":
                status, body = 200, _HOME
            elif self.path in PRODUCTS:
                status, body = 200, _page(self.path)
                if self.path == GZIPPED:
                    body = gzip.compress(body, mtime=0)
                    headers["Content-Encoding"] = "gzip"
            elif self.path == "/robots.txt":
                status, body = 200, b"User-agent: *\nAllow: /\n"
                headers["Content-Type"] = "text/plain"
            else:
                status, body = 404, b"not here"
                headers["Content-Type"] = "text/plain"
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
