"""A real forward HTTP proxy and a small shop site on loopback addresses, for the proxy tests.

:func:`forward_proxy` serves on 127.0.0.1: it takes absolute-form requests
(``GET http://host:port/path``), answers 407 unless ``Proxy-Authorization`` carries the
expected Basic credentials, and forwards the rest to the target with ``http.client``, minus
the hop-by-hop and proxy headers. It records every request it saw (target host, path and
headers), so a test can tell which proxy carried which host.

:func:`shop_sites` serves the same three pages (an index linking two products) on each of
several loopback addresses (127.0.0.x: distinct hosts for the per-host rotation) and records
each request's headers as the site received them.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["PRODUCTS", "Proxy", "Seen", "Sites", "forward_proxy", "shop_sites"]

#: The product pages each site serves: path -> title.
PRODUCTS = {"/products/1": "Kettle", "/products/2": "Teapot"}
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


@dataclass(frozen=True)
class Seen:
    """One request as a server saw it."""

    host: str
    path: str
    headers: dict[str, str]


@dataclass
class _Log:
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry: Seen) -> None:
        with self.lock:
            self.seen.append(entry)

    def all(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)


@dataclass
class Proxy:
    """A running :func:`forward_proxy`."""

    url: str
    log: _Log
    refused: list[Seen] = field(default_factory=list)

    @property
    def seen(self) -> list[Seen]:
        """The requests it forwarded (credentials accepted)."""
        return self.log.all()

    def hosts(self) -> set[str]:
        return {s.host for s in self.seen}


@contextlib.contextmanager
def _serving(host: str, handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def forward_proxy(username: str, password: str) -> Iterator[Proxy]:
    """A forward proxy on 127.0.0.1 requiring ``username``/``password`` (Basic)."""
    expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    log = _Log()
    refused: list[Seen] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, status: int, headers: Sequence[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            target = urlsplit(self.path)
            headers = dict(self.headers.items())
            entry = Seen(target.netloc, target.path or "/", headers)
            if target.scheme != "http" or not target.hostname:
                self._reply(400, [], b"absolute-form http:// requests only")
                return
            if self.headers.get("Proxy-Authorization") != expected:
                refused.append(entry)
                self._reply(407, [("Proxy-Authenticate", 'Basic realm="test"')], b"")
                return
            log.add(entry)
            forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
            # A site thread on a loaded box can take seconds to answer: wait as long as the
            # crawler does (its total_timeout, 30 s), so the proxy never fails a slow page.
            upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
            try:
                path = target.path or "/"
                if target.query:
                    path += "?" + target.query
                upstream.request("GET", path, headers=forwarded)
                answer = upstream.getresponse()
                body = answer.read()
                kept = [
                    (k, v)
                    for k, v in answer.getheaders()
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
                ]
                self._reply(answer.status, kept, body)
            except OSError:
                self._reply(502, [], b"bad gateway")
            finally:
                upstream.close()

    with _serving("127.0.0.1", Handler) as server:
        host, port = server.server_address[:2]
        yield Proxy(f"http://{host}:{port}", log, refused)


@dataclass
class Sites:
    """Running :func:`shop_sites`: ``bases`` by host (``http://127.0.0.x:port``)."""

    bases: dict[str, str]
    log: _Log

    @property
    def seen(self) -> list[Seen]:
        return self.log.all()


@contextlib.contextmanager
def shop_sites(hosts: Sequence[str]) -> Iterator[Sites]:
    """The same small shop on each of ``hosts`` (loopback addresses)."""
    log = _Log()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            host = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
            log.add(Seen(host, self.path, dict(self.headers.items())))
            if self.path == "/robots.txt":
                body, kind = b"User-agent: *\nAllow: /\n", "text/plain"
            elif self.path == "/":
                links = "".join(f'<a href="{p}">{t}</a>' for p, t in PRODUCTS.items())
                body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
            elif self.path in PRODUCTS:
                page = f"<html><body><h1>{PRODUCTS[self.path]}</h1></body></html>"
                body, kind = page.encode(), "text/html"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with contextlib.ExitStack() as stack:
        bases = {}
        for host in hosts:
            server = stack.enter_context(_serving(host, Handler))
            bases[host] = f"http://{host}:{server.server_address[1]}"
        yield Sites(bases, log)
