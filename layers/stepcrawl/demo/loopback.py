"""Serve one request handler on 127.0.0.1 in a daemon thread, for as long as a ``with`` lasts.

The loopback site the demo, the benchmarks and the tests stand up all start and stop the same
way; a handler class closes over its site's state, the port is the one the OS gave.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["serve_loopback"]


@contextmanager
def serve_loopback(handler: type[BaseHTTPRequestHandler], name: str) -> Iterator[int]:
    """Serve ``handler`` on a free port of 127.0.0.1 (a thread named ``name``); yields the
    port, and stops the server (closing its socket) when the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
