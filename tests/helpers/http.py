"""A base for the tests' small HTTP sites on 127.0.0.1: one way to answer, and quiet logs."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

__all__ = ["SiteHandler"]


class SiteHandler(BaseHTTPRequestHandler):
    """A request handler whose ``do_GET`` answers through :meth:`reply`; nothing is logged."""

    def reply(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args
