"""A chat receiver on 127.0.0.1 for the alert tests: a Slack incoming webhook that keeps every
post, and the helpers that read and wait for them."""

from __future__ import annotations

import html
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Receiver", "fields_of", "running_receiver", "serve", "wait_for"]


@dataclass
class Receiver:
    """A Slack incoming webhook on 127.0.0.1: keeps every post (with when it came)."""

    port: int = 0
    posts: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def texts(self) -> list[str]:
        with self.lock:
            return [str(body["text"]) for _, body in self.posts]

    def find(self, pattern: str) -> tuple[float, dict[str, Any]] | None:
        with self.lock:
            return next((p for p in self.posts if re.search(pattern, str(p[1]["text"]))), None)


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, int(server.server_address[1])


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    """A :class:`Receiver` serving until the block ends."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.posts.append((time.monotonic(), json.loads(raw)))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server, state.port = serve(Handler)
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def fields_of(body: dict[str, Any]) -> dict[str, str]:
    """The Slack message's fields (``*Label*\\nvalue``, mrkdwn-escaped) as a dict."""
    section = next(b for b in body["blocks"] if b["type"] == "section" and "fields" in b)
    pairs = (f["text"].split("\n", 1) for f in section["fields"])
    return {label.strip("*"): html.unescape(value) for label, value in pairs}


def wait_for(what: str, found: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
