"""How a container process reaches the emulator: its botocore requests over a local connection.

A Lambda container reaches AWS over HTTPS. Locally, a container is a process of its own
(:mod:`.processes`) and moto lives in the runtime's process; sending every request over
HTTP to moto's server (werkzeug, a socket, Flask's routing) took local runs to 0.45-0.60x of
threads, measured side by side (``bench/container_models.py``). So each request travels as
botocore prepared it (method, URL, signed headers, body) over a ``multiprocessing``
connection (a Unix socket, one per container thread), and this end hands it to moto's own
request handler (:func:`stepcrawl.emulator.in_process.dispatch`): the same routing, answers
and errors as the server's, without HTTP. A request moto cannot place that way (a service
not dispatched in-process, such as Secrets Manager) is sent on over HTTP to the emulator's
server, the URL the container asked for. Anything aimed outside loopback is refused: a
local container reaches only the emulator.
"""

from __future__ import annotations

import functools
import logging
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["LOOPBACK", "AwsBridge", "Exchange"]

log = logging.getLogger(__name__)

#: A request as it crosses: method, URL, headers, body.
Exchange = tuple[str, str, dict[str, str], bytes | None]
#: Hosts a container's request may go to over HTTP (the emulator's server listens there).
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})


class AwsBridge:
    """The runtime's end: a listener whose connections each carry one container thread's
    requests (:func:`answer` for each), until :meth:`close`."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="stepcrawl-bridge-")
        self.address = str(Path(self._directory) / "aws.sock")
        self.authkey = secrets.token_bytes(16)
        self._listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="aws-bridge", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection = self._listener.accept()
            except (OSError, EOFError):  # closed, or a peer that failed the handshake
                if self._closed.is_set():
                    return
                continue
            threading.Thread(
                target=_serve, args=(connection,), name="aws-bridge-conn", daemon=True
            ).start()

    def close(self) -> None:
        self._closed.set()
        try:
            self._listener.close()
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)


def _serve(connection: Connection) -> None:
    with connection:
        while True:
            try:
                exchange: Exchange = connection.recv()
            except (EOFError, OSError):  # the container ended (or was killed)
                return
            try:
                reply = answer(exchange)
            except Exception as exc:
                log.exception("the bridge could not answer %s %s", exchange[0], exchange[1])
                reply = (500, {}, f"{type(exc).__name__}: {exc}".encode())
            try:
                connection.send(reply)
            except OSError:  # the container ended meanwhile
                return


def answer(exchange: Exchange) -> tuple[int, dict[str, str], bytes]:
    """moto's answer to one request: status, headers, body."""
    from botocore.awsrequest import AWSPreparedRequest, HeadersDict  # noqa: PLC0415

    from stepcrawl.emulator.in_process import dispatch  # noqa: PLC0415

    method, url, headers, body = exchange
    # What botocore's own preparer makes (its stubs say HTTPHeaders; it is a HeadersDict).
    prepared_headers: Any = HeadersDict(headers)
    request = AWSPreparedRequest(method, url, prepared_headers, body, stream_output=False)
    response = dispatch(request)
    if response is None:
        return _over_http(request)
    return response.status_code, dict(response.headers), response.content


def _over_http(request: Any) -> tuple[int, dict[str, str], bytes]:
    """A request moto does not take in-process: on to the emulator's server, on loopback."""
    host = urlsplit(request.url or "").hostname or ""
    if host not in LOOPBACK:
        message = f"a local container reaches only the emulator, not {host or request.url!r}"
        return 403, {"x-amzn-errortype": "AccessDeniedException"}, message.encode()
    send: Callable[..., Any] = _http_session().send
    response = send(request)
    return response.status_code, dict(response.headers), response.content


@functools.cache
def _http_session() -> Any:
    """botocore's own HTTP sender, made once."""
    from botocore.httpsession import URLLib3Session  # noqa: PLC0415

    return URLLib3Session()
