"""A container process: one Lambda sandbox, as the runtime's process sees it from inside.

:func:`main` runs in a process forked for it (:mod:`.forking`, :mod:`.processes`): it takes
the function's environment (its own variables, Lambda's reserved ones, nothing of the
runtime's process) and its output streams, and talks to the runtime over the ``control``
connection:

1. the runtime sends the init (the handler reference, the container's name, where the bridge
   listens); the process points botocore at the bridge (:class:`_BridgeTransport`: requests
   to the emulator's endpoint travel to the runtime's process, :mod:`.bridge`), imports the
   handler (its init phase, timed) and answers ``("ready", init_ms)`` or
   ``("init_error", traceback)``;
2. per invocation, ``("invoke", event JSON, context, crash_at)``: the answer is
   ``("ok", result JSON, lines, report)`` or ``("error", type, message, traceback, lines,
   report)``. Event and result cross as JSON, as on Lambda (a result JSON cannot express
   fails the invocation, as Lambda's ``Runtime.MarshalError`` does);
3. ``crash_at`` > 0 (chaos): at that project line (:mod:`.crash_points`) the process says
   ``("crash", where)``, flushes its output and kills itself with SIGKILL.

``report`` is what the init's ``report`` reference (``module:function``) returns after each
invocation (local mode: the container's metered usage). What the handler prints goes to the
process's stdout and stderr, which the runtime reads line by line. This module imports no
moto and none of the runtime: a cold start pays for botocore and the handler alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from stepcrawl.emulator.heap import freeze_heap
from stepcrawl.emulator.lambda_runtime.crash_points import Tracer, run_traced

__all__ = ["load_handler", "main"]

Handler = Callable[[dict[str, Any], Any], Any]


def load_handler(reference: str, module_name: str | None = None) -> Handler:
    """Import ``"path/to/handler.py:function"`` as its own module and return the function."""
    path_text, sep, attribute = reference.rpartition(":")
    if not sep or not path_text or not attribute:
        raise ValueError(f"handler reference {reference!r} is not 'path/to/file.py:function'")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise ValueError(f"handler file {path} does not exist")
    name = module_name or f"_stepcrawl_lambda_{re.sub(r'[^A-Za-z0-9_]', '_', str(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise ValueError(f"{path} has no callable {attribute!r}")
    return handler  # type: ignore[no-any-return]


class _Context:
    """What the Python runtime passes as ``context`` (Powertools' ``LambdaContext`` shape)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.function_name: str = fields["function_name"]
        self.function_version: str = fields["function_version"]
        self.invoked_function_arn: str = fields["invoked_function_arn"]
        self.memory_limit_in_mb: int = fields["memory_limit_in_mb"]
        self.aws_request_id: str = fields["aws_request_id"]
        self.log_group_name: str = fields["log_group_name"]
        self.log_stream_name: str = fields["log_stream_name"]
        self.identity: Any = None
        self.client_context: Any = None
        self.tenant_id: str | None = None
        self._deadline = time.monotonic() + float(fields["remaining_s"])

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class _RawBody(io.BytesIO):
    """A response body as botocore reads one (``urllib3``'s ``stream``)."""

    def stream(self, **_kwargs: Any) -> Any:
        contents = self.read()
        while contents:
            yield contents
            contents = self.read()


class _BridgeTransport:
    """botocore's ``Endpoint._send`` for this process: requests to the emulator's endpoints
    over a connection per thread to the runtime's process; any other over HTTP, as before."""

    def __init__(self, address: str, authkey: bytes, prefixes: tuple[str, ...]) -> None:
        from botocore.endpoint import Endpoint  # noqa: PLC0415 - after sys.path is set

        self._address, self._authkey, self._prefixes = address, authkey, prefixes
        self._local = threading.local()
        self._http_send = getattr(Endpoint, "_send")  # noqa: B009 - botocore's stubs omit it
        transport = self

        def send(endpoint: Any, request: Any) -> Any:
            return transport.send(endpoint, request)

        setattr(Endpoint, "_send", send)  # noqa: B010

    def _connection(self) -> Connection:
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = Client(
                self._address, family="AF_UNIX", authkey=self._authkey
            )
        return connection

    def send(self, endpoint: Any, request: Any) -> Any:
        from botocore.awsrequest import AWSResponse  # noqa: PLC0415

        url = request.url or ""
        if not url.startswith(self._prefixes):
            return self._http_send(endpoint, request)
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        if isinstance(body, str):
            body = body.encode()
        connection = self._connection()
        connection.send((request.method, url, dict(request.headers.items()), body))
        status, headers, content = connection.recv()
        return AWSResponse(url, status, headers, _RawBody(content))


def _endpoint_prefixes(endpoint: str | None) -> tuple[str, ...]:
    if not endpoint:
        return ()
    base = endpoint.rstrip("/") + "/"
    return (base, base.replace("://127.0.0.1:", "://localhost:"))


def _die(control: Connection) -> Callable[[str], None]:
    def kill(where: str) -> None:
        control.send(("crash", where))
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    return kill


def _invoke(
    handler: Handler,
    message: tuple[str, str, dict[str, Any], int | None],
    kill: Callable[[str], None],
) -> tuple[Any, ...]:
    _, event_json, fields, crash_at = message
    event = json.loads(event_json)
    context = _Context(fields)
    tracer = Tracer(crash_at, kill) if crash_at else None
    try:
        if tracer is None:
            result = handler(event, context)
        else:
            result = run_traced(tracer, lambda: handler(event, context))
        lines = tracer.lines if tracer else 0
        try:
            return ("ok", json.dumps(result), lines)
        except (TypeError, ValueError) as exc:
            return ("error", "Runtime.MarshalError", f"Unable to marshal response: {exc}", "", 0)
    except Exception as exc:  # noqa: BLE001 - the invocation's error, as Lambda reports it
        lines = tracer.lines if tracer else 0
        return ("error", type(exc).__name__, str(exc), traceback.format_exc(), lines)


def main(control_fd: int, stdout_fd: int, stderr_fd: int, environ: dict[str, str]) -> None:
    """The container's life (see the module docstring), in a process just forked by
    :mod:`.forking`: its control connection, output streams and the function's environment
    (all of it: nothing of the fork server's stays)."""
    os.environ.clear()
    os.environ.update(environ)
    for source, target in ((stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(source, target)
        os.close(source)
    control = Connection(control_fd)
    init: dict[str, Any] = control.recv()
    threading.current_thread().name = init["name"]
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started = time.perf_counter()
    try:
        _BridgeTransport(
            init["bridge"], init["authkey"], _endpoint_prefixes(os.environ.get("AWS_ENDPOINT_URL"))
        )
        handler = load_handler(init["handler"])
        report: Callable[[], Any] | None = None
        if init.get("report"):
            module, _, attribute = str(init["report"]).partition(":")
            report = getattr(importlib.import_module(module), attribute)
    except BaseException:  # noqa: BLE001 - Lambda's Runtime.ImportModuleError / init error
        control.send(("init_error", traceback.format_exc()))
        return
    freeze_heap()  # what the init built lives as long as the container (emulator/heap.py)
    control.send(("ready", (time.perf_counter() - started) * 1000))
    kill = _die(control)
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        answer = _invoke(handler, message, kill)
        control.send((*answer, report() if report else None))
