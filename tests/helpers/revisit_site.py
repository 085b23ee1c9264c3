"""A site on 127.0.0.1 that answers conditional requests, for incremental recrawls.

The home page links six products and an about page. Each page has a version: its ETag is a
hash of its body, its Last-Modified the version's date; which of the two a page sends is part
of the page (``validators``), so both If-None-Match and If-Modified-Since are exercised. The
about page sends neither and prints the time it was served (what the items' fingerprint must
see through). Between runs a test changes pages (:meth:`RevisitSite.change`) and deletes
them (:meth:`RevisitSite.delete`: 410, still linked from the unchanged home page). Every
request is recorded with its conditional headers and the status it got.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

__all__ = ["PRODUCTS", "Page", "Request", "RevisitSite", "revisit_site"]

Validators = Literal["etag", "last-modified", "both", "none"]

#: Product pages: path -> the validators it sends.
PRODUCTS: dict[str, Validators] = {
    "/p/1": "etag",
    "/p/2": "etag",
    "/p/3": "last-modified",
    "/p/4": "both",
    "/p/5": "last-modified",
    "/p/6": "etag",
}
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Page:
    title: str
    validators: Validators
    version: int = 1
    gone: int | None = None  # the status a deleted page answers

    def body(self, links: list[str]) -> bytes:
        anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
        return (
            f"<html><head><title>{self.title}</title></head><body><h1>{self.title}</h1>"
            f"{anchors}</body></html>"
        ).encode()

    @property
    def modified(self) -> datetime:
        return _EPOCH + timedelta(days=self.version)


@dataclass(frozen=True)
class Request:
    path: str
    if_none_match: str | None
    if_modified_since: str | None
    status: int

    @property
    def conditional(self) -> bool:
        return self.if_none_match is not None or self.if_modified_since is not None


@dataclass
class RevisitSite:
    base: str
    pages: dict[str, Page] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def change(self, path: str, title: str) -> None:
        page = self.pages[path]
        page.title, page.version = title, page.version + 1

    def delete(self, path: str, status: int = 410) -> None:
        self.pages[path].gone = status

    def forget(self) -> None:
        with self.lock:
            self.requests.clear()

    def seen(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path != "/robots.txt"]

    def links(self, path: str) -> list[str]:
        return [*PRODUCTS, "/about"] if path == "/" else []

    def answer(
        self, path: str, if_none_match: str | None, if_modified_since: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        page = self.pages.get(path)
        if page is None:
            return 404, {"Content-Type": "text/plain"}, b"not found"
        if page.gone is not None:
            return page.gone, {"Content-Type": "text/plain"}, b"gone"
        body = page.body(self.links(path))
        if path == "/about":  # no validators, and a part that changes on every request
            body = body.replace(b"</body>", f"<p>served {time.time_ns()}</p></body>".encode())
        headers = {"Content-Type": "text/html; charset=utf-8"}
        etag = f'"{hashlib.blake2b(body, digest_size=6).hexdigest()}"'
        modified = page.modified
        if page.validators in ("etag", "both"):
            headers["ETag"] = etag
        if page.validators in ("last-modified", "both"):
            headers["Last-Modified"] = format_datetime(modified, usegmt=True)
        # RFC 9110 13.2.2: If-None-Match first; If-Modified-Since only without it.
        if if_none_match is not None:
            if "ETag" in headers and _weak_match(if_none_match, etag):
                return 304, {k: v for k, v in headers.items() if k != "Content-Type"}, b""
        elif if_modified_since is not None and "Last-Modified" in headers:
            try:
                since = parsedate_to_datetime(if_modified_since)
            except (TypeError, ValueError):
                since = None
            if since is not None and modified <= since:
                return 304, {k: v for k, v in headers.items() if k != "Content-Type"}, b""
        return 200, headers, body


def _weak_match(header: str, etag: str) -> bool:
    """If-None-Match's weak comparison: any listed tag (W/ or not) equal to ``etag``."""
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


@contextmanager
def revisit_site() -> Iterator[RevisitSite]:
    site: RevisitSite

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            inm = self.headers.get("If-None-Match")
            ims = self.headers.get("If-Modified-Since")
            with site.lock:
                status, headers, body = site.answer(self.path, inm, ims)
                site.requests.append(Request(self.path, inm, ims, status))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if status != 304:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = int(server.server_address[1])
    site = RevisitSite(base=f"http://127.0.0.1:{port}")
    site.pages["/"] = Page("Home", "both")
    site.pages["/about"] = Page("About us", "none")
    for n, (path, validators) in enumerate(PRODUCTS.items(), start=1):
        site.pages[path] = Page(f"Product {n}", validators)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
