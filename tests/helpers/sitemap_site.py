"""A site on 127.0.0.1 whose pages are reachable only through its sitemaps (no links at all).

``/robots.txt`` names the index; the index lists a plain child sitemap, a gzip one (served as
``application/x-gzip``, not as a content coding), one whose index entry is old, a truncated
(malformed) one, and one on another host (``localhost``, off the task's domains). Pages have
a ``lastmod`` each (or none); :data:`SINCE` splits them. Every request is logged by path, so a
test can tell what was never fetched.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["NEWER", "OLDER", "SINCE", "SitemapSite", "sitemap_site"]

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
#: The task's ``sitemap_since``.
SINCE = "2026-01-01"
#: Pages listed with a lastmod on/after SINCE, or none: the ones a crawl with SINCE gets
#: (p8 is listed by the malformed sitemap before its error).
NEWER = ("p1", "p2", "p3", "p5", "p8")
#: Pages listed older than SINCE (p7 only by a sitemap whose index entry is old).
OLDER = ("p4", "p6", "p7")


def _urlset(entries: list[tuple[str, str | None]]) -> str:
    urls = "".join(
        f"<url><loc>{loc}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>"
        for loc, mod in entries
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}">{urls}</urlset>\n'


def _index(entries: list[tuple[str, str | None]]) -> str:
    maps = "".join(
        f"<sitemap><loc>{loc}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</sitemap>"
        for loc, mod in entries
    )
    return f'<?xml version="1.0"?>\n<sitemapindex xmlns="{NS}">{maps}</sitemapindex>\n'


@dataclass
class SitemapSite:
    base: str  # http://127.0.0.1:PORT
    port: int
    requests: list[str] = field(default_factory=list)

    @property
    def index(self) -> str:
        return f"{self.base}/sitemap_index.xml"

    def page(self, name: str) -> str:
        return f"{self.base}/pages/{name}"

    def documents(self) -> dict[str, tuple[str, bytes]]:
        """path -> (content type, body)."""
        b, off = self.base, f"http://localhost:{self.port}"
        plain = _urlset(
            [
                (f"{b}/pages/p1", "2026-03-01"),
                (f"{b}/pages/p2", "2026-01-15T08:30:00+01:00"),
                (f"{b}/pages/p3", None),
                (f"{b}/pages/p4", "2025-12-01"),
            ]
        )
        zipped = _urlset(
            [
                (f"{b}/pages/p5", "2026-04-01T10:00:00Z"),
                (f"{b}/pages/p6", "2025-06-01"),
                (f"{off}/pages/p99", "2026-05-01"),  # off the task's domains
            ]
        )
        old = _urlset([(f"{b}/pages/p7", "2024-02-01")])
        broken = _urlset([(f"{b}/pages/p8", "2026-02-01"), (f"{b}/pages/p9", "2026-02-01")])
        broken = broken[: broken.index("/pages/p9") - 10]  # cut inside the second entry
        index = _index(
            [
                (f"{b}/sitemaps/plain.xml", "2026-04-02"),
                (f"{b}/sitemaps/zipped.xml.gz", None),
                (f"{b}/sitemaps/old.xml", "2024-03-01"),  # older than SINCE: not read
                (f"{b}/sitemaps/broken.xml", "2026-02-02"),
                (f"{off}/sitemaps/offsite.xml", "2026-05-01"),  # off the task's domains
            ]
        )
        xml = "application/xml"
        return {
            "/robots.txt": (
                "text/plain",
                f"User-agent: *\nAllow: /\nSitemap: {b}/sitemap_index.xml\n".encode(),
            ),
            "/sitemap_index.xml": (xml, index.encode()),
            "/sitemaps/plain.xml": (xml, plain.encode()),
            "/sitemaps/zipped.xml.gz": ("application/x-gzip", gzip.compress(zipped.encode())),
            "/sitemaps/old.xml": (xml, old.encode()),
            "/sitemaps/broken.xml": (xml, broken.encode()),
            "/sitemaps/offsite.xml": (xml, _urlset([(f"{b}/pages/p98", None)]).encode()),
        }

    def fetched(self, path: str) -> bool:
        return path in self.requests


@contextmanager
def sitemap_site() -> Iterator[SitemapSite]:
    site: SitemapSite

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.requests.append(self.path)
            documents = site.documents()
            if self.path in documents:
                content_type, body = documents[self.path]
                status = 200
            elif self.path == "/" or self.path.startswith("/pages/"):
                name = self.path.rsplit("/", 1)[-1] or "home"
                status, content_type = 200, "text/html; charset=utf-8"
                body = f"<html><head><title>{name}</title></head><h1>{name}</h1></html>".encode()
            else:
                status, content_type, body = 404, "text/plain", b"not found"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = int(server.server_address[1])
    site = SitemapSite(base=f"http://127.0.0.1:{port}", port=port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
