"""The local console: the page, its assets and the API on a loopback HTTP server.

Guarded as Jupyter guards its notebooks: the server listens on 127.0.0.1 only, the URL
``stepcrawl serve`` prints carries a random token (exchanged for an HttpOnly, SameSite=Strict
cookie on first visit, so it leaves the address bar), every API request needs the token, and
requests that change something also need it in the ``X-Stepcrawl-Token`` header, which a
cross-site form cannot send. The ``Host`` header must name the loopback address and port, so
a DNS-rebinding page (evil.example resolving to 127.0.0.1) gets 403.
"""

from __future__ import annotations

import hmac
import json
import logging
import mimetypes
import queue
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stepcrawl.console.api import ApiRequest, ConsoleApi
from stepcrawl.console.events import EventBus
from stepcrawl.console.store import FileStore

__all__ = ["COOKIE", "TOKEN_HEADER", "ConsoleServer", "static_dir"]

logger = logging.getLogger(__name__)

COOKIE = "stepcrawl_console"
TOKEN_HEADER = "X-Stepcrawl-Token"  # noqa: S105 - a header name, not a secret
_TOKEN_PLACEHOLDER = "%STEPCRAWL_TOKEN%"  # noqa: S105 - replaced by the token
_MAX_BODY = 2 * 1024 * 1024
_KEEPALIVE_SECONDS = 15.0
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the token must not leave in a Referer
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
}


def static_dir() -> Path:
    """The built page and assets shipped inside the package (``make console`` builds them)."""
    return Path(__file__).resolve().parent / "static"


class ConsoleServer:
    """Serve ``api`` and the page on ``127.0.0.1:port`` (0: a free port) until stopped."""

    def __init__(
        self,
        api: ConsoleApi,
        *,
        events: EventBus | None = None,
        port: int = 0,
        token: str | None = None,
        watch_every: float | None = 1.0,
        assets: Path | None = None,
    ) -> None:
        self.api = api
        self.events = events or EventBus()
        self.token = token or secrets.token_urlsafe(24)
        self.assets = assets or static_dir()
        self.stopping = threading.Event()
        self._watch_every = watch_every
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_class(self))
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        """The address to open: with the token, as ``stepcrawl serve`` prints it."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    @property
    def allowed_hosts(self) -> frozenset[str]:
        return frozenset(f"{h}:{self.port}" for h in ("127.0.0.1", "localhost", "[::1]"))

    def start(self) -> ConsoleServer:
        if isinstance(self.api.store, FileStore):
            # Every file's version in the history before anyone edits: a merge's base.
            self.api.store.scan()
        serving = threading.Thread(
            target=self._httpd.serve_forever, name="console-http", daemon=True
        )
        serving.start()
        self._threads.append(serving)
        if self._watch_every is not None and isinstance(self.api.store, FileStore):
            watching = threading.Thread(target=self._watch, name="console-watch", daemon=True)
            watching.start()
            self._threads.append(watching)
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def _watch(self) -> None:
        """Notice files changed on disk (an editor, git) so open consoles hear of them."""
        store = self.api.store
        assert isinstance(store, FileStore)
        while not self.stopping.wait(self._watch_every):
            try:
                store.scan(settled_only=True)
            except Exception:  # a watcher that dies silently would be worse than a log line
                logger.exception("console: scanning %s failed", store.directory)

    def token_ok(self, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(str(offered), self.token)


def _handler_class(server: ConsoleServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_ConsoleHandler):
        console = server

    return Handler


class _ConsoleHandler(BaseHTTPRequestHandler):
    console: ConsoleServer
    server_version = "stepcrawl-console"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("console: " + format, *args)

    # -- dispatch ------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        if self.headers.get("Host", "") not in self.console.allowed_hosts:
            self._send_text(
                HTTPStatus.FORBIDDEN,
                "the console answers only to http://127.0.0.1:PORT (Host header refused)",
            )
            return
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path.startswith("/api/") or path == "/api":
            self._api(path, query)
        elif path == "/config.json":
            self._send_json(HTTPStatus.OK, {"mode": "local", "api": "/api"})
        elif path in ("/", "/index.html"):
            self._page(query)
        else:
            self._asset(path)

    def _authorized(self, query: dict[str, str]) -> bool:
        return any(
            self.console.token_ok(offered)
            for offered in (self._cookie(), query.get("token"), self.headers.get(TOKEN_HEADER))
        )

    def _cookie(self) -> str | None:
        for part in self.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == COOKIE:
                return value
        return None

    # -- the page ------------------------------------------------------------------------------

    def _page(self, query: dict[str, str]) -> None:
        offered = query.get("token")
        if offered is not None:
            if not self.console.token_ok(offered):
                self._send_text(HTTPStatus.FORBIDDEN, "wrong token: open the URL serve printed")
                return
            # The token becomes a cookie and leaves the address bar (and the history).
            self.send_response(HTTPStatus.FOUND)
            self.send_header("Location", "/")
            self.send_header("Set-Cookie", f"{COOKIE}={offered}; HttpOnly; SameSite=Strict; Path=/")
            self.send_header("Content-Length", "0")
            self._common_headers()
            self.end_headers()
            return
        if not self._authorized(query):
            self._send_text(
                HTTPStatus.UNAUTHORIZED,
                "open the console with the URL `stepcrawl serve` printed (it carries a token)",
            )
            return
        index = self.console.assets / "index.html"
        if not index.exists():
            self._send_text(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the console's assets are not built ({index} is missing): run `make console`",
            )
            return
        html = index.read_text(encoding="utf-8").replace(_TOKEN_PLACEHOLDER, self.console.token)
        self._send_bytes(HTTPStatus.OK, html.encode(), "text/html; charset=utf-8", cache=False)

    def _asset(self, path: str) -> None:
        root = self.console.assets.resolve()
        target = (root / path.lstrip("/")).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            self._send_text(HTTPStatus.NOT_FOUND, f"no {path}")
            return
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind == "application/javascript":
            kind += "; charset=utf-8"
        self._send_bytes(HTTPStatus.OK, target.read_bytes(), kind, cache=False)

    # -- the API -------------------------------------------------------------------------------

    def _api(self, path: str, query: dict[str, str]) -> None:
        if not self._authorized(query):
            self._send_json(
                HTTPStatus.UNAUTHORIZED,
                {"error": "no or wrong token: open the URL `stepcrawl serve` printed"},
            )
            return
        method = self.command
        if method not in ("GET", "HEAD") and not self.console.token_ok(
            self.headers.get(TOKEN_HEADER)
        ):
            self._send_json(
                HTTPStatus.FORBIDDEN,
                {"error": f"a change needs the {TOKEN_HEADER} header (the page sends it)"},
            )
            return
        if path == "/api/events" and method == "GET":
            self._events()
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self._send_json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body over 2 MB"})
            return
        body = self.rfile.read(length) if length else b""
        response = self.console.api.handle(
            ApiRequest(
                method="GET" if method == "HEAD" else method,
                path=path,
                query=query,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
        )
        self._send_bytes(
            HTTPStatus(response.status),
            response.encode(),
            "application/json; charset=utf-8",
            cache=False,
            extra=response.headers,
        )

    def _events(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self._common_headers()
        self.end_headers()
        self.close_connection = True
        with self.console.events.subscribe() as inbox:
            try:
                self._write(b'event: hello\ndata: {"subscribed": true}\n\n')
                while not self.console.stopping.is_set():
                    try:
                        event = inbox.get(timeout=_KEEPALIVE_SECONDS)
                    except queue.Empty:
                        self._write(b": keep-alive\n\n")
                        continue
                    self._write(event.encode())
            except (BrokenPipeError, ConnectionResetError):
                return  # the page closed or reloaded

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    # -- responses -----------------------------------------------------------------------------

    def _common_headers(self) -> None:
        for key, value in _SECURITY_HEADERS.items():
            self.send_header(key, value)

    def _send_json(self, status: HTTPStatus, body: Any) -> None:
        data = json.dumps(body).encode()
        self._send_bytes(status, data, "application/json; charset=utf-8", cache=False)

    def _send_text(self, status: HTTPStatus, text: str) -> None:
        self._send_bytes(status, (text + "\n").encode(), "text/plain; charset=utf-8", cache=False)

    def _send_bytes(
        self,
        status: HTTPStatus,
        data: bytes,
        content_type: str,
        *,
        cache: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self._common_headers()
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
