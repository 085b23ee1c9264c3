"""The demo shop served on 127.0.0.1 from a background thread (standard library only).

Every page except the calendar trap is rendered once, when the site is built, so a request
costs a dict lookup and a socket write: hundreds of requests per second on two cores.

Two pages misbehave on purpose; both are ordinary product pages (the catalogue's second and
third product), so a crawl that mishandles them misses items:

- ``flaky_path`` answers 500 to its first two requests, then 200. The count lives in the
  :class:`DemoSite` instance and survives restarts of it: a second crawl against the same
  instance gets 200 at once unless :meth:`DemoSite.reset` re-arms it. ``flaky=False`` turns it
  into a normal page.
- ``slow_path`` answers after ``slow_delay`` seconds (default 0.2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self, cast
from urllib.parse import parse_qs, urlsplit

from stepcrawl.demo.pages import (
    Page,
    admin_page,
    calendar_page,
    error_page,
    home_page,
    listing_page,
    product_page,
    robots_page,
)
from stepcrawl.demo.paths import (
    ADMIN_PATH,
    CALENDAR_PATTERN,
    category_path,
    product_path,
)
from stepcrawl.demo.requestlog import LoggedRequest, RequestLog
from stepcrawl.demo.shop import ShopModel

__all__ = ["DEMO_PORT", "FLAKY_FAILURES", "DemoSite"]

#: The port ``pipelines/demo-shop.yaml`` seeds; ``stepcrawl demo`` rewrites the seed instead
#: of relying on it, but ``DemoSite(port=DEMO_PORT)`` makes the file usable as it is.
DEMO_PORT = 8765

#: How many 500s the flaky page answers before its first 200.
FLAKY_FAILURES = 2

_HOST = "127.0.0.1"
_LISTING = re.compile(r"^/category/(?P<slug>[a-z0-9-]+)/$")
_PAGE_NUMBER = re.compile(r"^[1-9][0-9]{0,5}$")


class DemoSite:
    """The demo shop over HTTP; use as a context manager or with :meth:`start` / :meth:`stop`.

    ``port=0`` (default) takes a free ephemeral port; :attr:`url` says which.
    """

    def __init__(
        self,
        model: ShopModel | None = None,
        *,
        port: int = 0,
        slow_delay: float = 0.2,
        flaky: bool = True,
    ) -> None:
        if slow_delay < 0:
            raise ValueError(f"slow_delay must be >= 0, got {slow_delay}")
        self.model = model if model is not None else ShopModel()
        self.slow_delay = slow_delay
        self.flaky = flaky
        self.log = RequestLog()
        products = self.model.products
        self.flaky_path = product_path(products[1 % len(products)].sku)
        self.slow_path = product_path(products[2 % len(products)].sku)
        self._requested_port = port
        self._pages = self._render()
        self._not_found = error_page(404)
        self._server_error = error_page(500)
        self._flaky_lock = threading.Lock()
        self._flaky_seen = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _render(self) -> dict[str, Page]:
        model = self.model
        pages = {"/": home_page(model), "/robots.txt": robots_page(), ADMIN_PATH: admin_page()}
        for category in model.categories:
            for product in category.products:
                pages[product_path(product.sku)] = product_page(product, category)
            for number in range(1, model.page_count(category.slug) + 1):
                # Keyed by path and page number; the query's other keys and order are ignored.
                page = listing_page(model, category, number)
                pages[f"{category_path(category.slug)}?page={number}"] = page
        return pages

    # ------------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("the demo site is already running")
        server = _Server((_HOST, self._requested_port), self)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() waits up to this long
            name=f"stepcrawl-demo-site:{server.server_address[1]}",
            daemon=True,
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the demo site is not running: call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/``."""
        return f"http://{_HOST}:{self.port}/"

    def url_for(self, path: str) -> str:
        """The absolute URL of a site path such as ``/robots.txt``."""
        return self.url + path.removeprefix("/")

    def change_markup(self, old: str, new: str, *, every: int = 3) -> list[str]:
        """A site redesign between two runs: on every ``every``-th product page (in catalogue
        order) the markup ``old`` becomes ``new`` (e.g. ``class="price"`` -> ``class="cost"``:
        a selector stops matching there). The paths changed; :meth:`restore_markup` undoes it.
        """
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        changed: list[str] = []
        for n, product in enumerate(self.model.products):
            path = product_path(product.sku)
            page = self._pages[path]
            if n % every == 0 and old.encode() in page.body:
                body = page.body.replace(old.encode(), new.encode())
                self._pages[path] = dataclasses.replace(page, body=body)
                changed.append(path)
        return changed

    def restore_markup(self) -> None:
        """Every page as the model renders it (undoes :meth:`change_markup`)."""
        self._pages = self._render()

    def reset(self) -> None:
        """Clear the request log and re-arm the flaky page."""
        with self._flaky_lock:
            self._flaky_seen = 0
        self.log.clear()

    # ------------------------------------------------------------------------ responses

    def respond(self, target: str) -> Page:
        """The response to a request for ``target`` (path and query), hazards included."""
        path, _, query = target.partition("?")
        if path == self.flaky_path and self.flaky:
            with self._flaky_lock:
                self._flaky_seen += 1
                failing = self._flaky_seen <= FLAKY_FAILURES
            if failing:
                return self._server_error
        if path == self.slow_path and self.slow_delay:
            time.sleep(self.slow_delay)
        page = self._pages.get(path)
        if page is not None:
            return page
        listing = _LISTING.match(path)
        if listing is not None:
            number = parse_qs(query, keep_blank_values=True).get("page", ["1"])[0]
            if _PAGE_NUMBER.match(number):
                key = f"{path}?page={int(number)}"
                return self._pages.get(key, self._not_found)
            return self._not_found
        calendar = CALENDAR_PATTERN.match(path)
        if calendar is not None:
            return calendar_page(int(calendar["year"]), int(calendar["month"]))
        return self._not_found


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Keep-alive connections park a thread in a blocking read; closing must not wait for them.
    block_on_close = False
    # socketserver's default listen backlog of 5 drops connects under a crawler's burst, and
    # the client's SYN retry then costs a whole second.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], site: DemoSite) -> None:
        self.site = site
        self._open_lock = threading.Lock()
        self._open: set[Any] = set()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Hang up on every client: a stopped site must not answer on a kept-alive connection."""
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is normal for a crawler under test.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: crawlers reuse connections
    server_version = "StepcrawlDemo/1.0"
    # Headers and body are two writes; with Nagle on, delayed ACKs add ~40 ms per response.
    disable_nagle_algorithm = True
    timeout = 10  # an idle keep-alive connection frees its thread after this long

    def do_GET(self) -> None:
        self._serve(with_body=True)

    def do_HEAD(self) -> None:
        self._serve(with_body=False)

    def _serve(self, *, with_body: bool) -> None:
        arrived = time.monotonic()
        site = cast(_Server, self.server).site
        target = self.path
        if not target.startswith("/"):  # absolute-form request line (proxy style)
            parts = urlsplit(target)
            target = parts.path + (f"?{parts.query}" if parts.query else "")
        page = site.respond(target)
        # Logged before the response goes out: once a client has the answer, so does the log.
        site.log.record(
            LoggedRequest(
                method=self.command,
                target=target,
                status=page.status,
                time=arrived,
                elapsed=time.monotonic() - arrived,
                user_agent=self.headers.get("User-Agent"),
            )
        )
        self.send_response(page.status)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(page.body)))
        self.end_headers()
        if with_body:
            self.wfile.write(page.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: ARG002
        # The request log replaces http.server's stderr lines.
        return
