"""Where container processes come from: a fork server with the libraries already imported.

A container's cold start imports its handler, and through it botocore, httpx, Powertools,
pydantic and the library: ~0.7 s of CPU each, which a short local crawl that scales to a
dozen containers pays again and again on two cores. So containers are forked from a *fork
server*: a process of its own (``python -m stepcrawl.emulator.lambda_runtime.forking``),
started once per runtime process with a clean environment, that imports :data:`PRELOADED`
(and the runtime's ``preload``) and then forks one child per request. A child starts with
the server's freshly imported modules (module state as after an import: nothing ran in the
server), takes the function's environment and its file descriptors, and becomes the
container (:func:`~.sandbox.main`). multiprocessing's own fork server is not used: every
child it forks re-imports the runtime's ``__main__`` module (pytest, the CLI, a user's
script), which a container must not run.

A request is one message on a Unix socket: the child's environment (JSON) and three file
descriptors (its control connection, stdout, stderr, passed with ``SCM_RIGHTS``); the answer
is the child's pid. The server reaps its children itself; it ends when the runtime's process
closes its socket (or dies).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = ["PRELOADED", "ForkServer", "fork_server"]

#: What the server imports before it forks: the third-party libraries every handler imports.
PRELOADED: Final = (
    "boto3",
    "botocore.session",
    "botocore.client",
    "httpx",
    "aiohttp",
    "selectolax.lexbor",
    "pydantic",
    "aws_lambda_powertools",
    "aws_lambda_powertools.utilities.parser",
    "aws_xray_sdk.core",
    "stepcrawl.emulator.lambda_runtime.sandbox",
)
_MAX_REQUEST: Final = 1 << 20  # bytes of one request's environment (Lambda allows 4 KB)
_PID: Final = struct.Struct("<q")


class ForkServer:
    """The runtime's end of a fork server (see the module docstring)."""

    def __init__(self, preload: Sequence[str], environment: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket = ours
        self._lock = threading.Lock()
        self._process = subprocess.Popen(  # noqa: S603 - this interpreter, our module
            [
                sys.executable,
                "-m",
                "stepcrawl.emulator.lambda_runtime.forking",
                str(theirs.fileno()),
                *PRELOADED,
                *preload,
            ],
            env=dict(environment),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()

    def fork(self, environ: Mapping[str, str], fds: Sequence[int]) -> int:
        """A new child with ``environ`` and ``fds`` (control, stdout, stderr): its pid."""
        payload = json.dumps(dict(environ)).encode()
        with self._lock:
            socket.send_fds(self._socket, [struct.pack("<I", len(payload)) + payload], list(fds))
            answer = _read_exactly(self._socket, _PID.size)
        if len(answer) != _PID.size:
            raise RuntimeError(f"the containers' fork server ended (exit {self._process.poll()})")
        pid: int = _PID.unpack(answer)[0]
        return pid

    @property
    def ended(self) -> bool:
        return self._process.poll() is not None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_servers: dict[tuple[str, ...], ForkServer] = {}
_servers_lock = threading.Lock()


def fork_server(preload: Sequence[str], environment: Mapping[str, str]) -> ForkServer:
    """This process's fork server for ``preload`` (started on first use, closed at exit)."""
    key = tuple(preload)
    with _servers_lock:
        server = _servers.get(key)
        if server is None or server.ended:
            server = _servers[key] = ForkServer(key, environment)
        return server


@atexit.register
def _close_servers() -> None:
    with _servers_lock:
        for server in _servers.values():
            server.close()
        _servers.clear()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _serve(fd: int, modules: Sequence[str]) -> None:
    """The server's loop: preload, then fork a child per request until the socket closes."""
    for module in modules:
        importlib.import_module(module)
    from stepcrawl.emulator.heap import freeze_heap  # noqa: PLC0415
    from stepcrawl.emulator.lambda_runtime.sandbox import main  # noqa: PLC0415

    freeze_heap()  # the children's libraries: no collection of theirs passes over them

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    requests = socket.socket(fileno=fd)
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(requests, _MAX_REQUEST, 3)
        except OSError:
            return
        if not message:
            return  # the runtime's process closed its end
        (size,) = struct.unpack("<I", message[:4])
        body = message[4:]
        while len(body) < size:
            chunk = requests.recv(size - len(body))
            if not chunk:
                return
            body += chunk
        environ = json.loads(body)
        pid = os.fork()
        if pid == 0:  # the container
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own subprocesses are waited on
            requests.close()
            control, stdout, stderr = fds
            code = 0
            try:
                main(control, stdout, stderr, environ)
            except BaseException:  # noqa: BLE001 - a container that fails ends, nothing more
                code = 1
            finally:
                os._exit(code)
        for descriptor in fds:
            os.close(descriptor)
        requests.sendall(_PID.pack(pid))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2:])
