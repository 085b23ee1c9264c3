"""A container as a process: started with the function's own environment, killed like one.

On Lambda a container is a process (in a micro-VM) with the function's environment variables,
its own globals, a cold start that imports the handler, and a hard end: past its timeout or
its memory the sandbox is killed and whatever it was doing stops. :class:`ContainerProcess`
plays that: a Python process running :mod:`.sandbox`, started with exactly

- the function's variables (the template's, as deployed),
- Lambda's reserved ones (``AWS_LAMBDA_FUNCTION_NAME``, ``..._MEMORY_SIZE``,
  ``..._LOG_STREAM_NAME``, ``AWS_REGION``, ``PYTHONPATH``, ...; not ``LAMBDA_TASK_ROOT``,
  which would tell the library it runs on AWS itself),
- of the runtime's process only what an interpreter needs (:data:`_INHERITED`), with the
  developer's AWS config files hidden so that no profile leaks in;

and nothing else: a variable of one function is invisible to another's containers. Its
output (the function's log) is read line by line by threads named ``lambda-<function>-<n>``
and written to this process's stdout and stderr, where local mode takes it for CloudWatch.
:meth:`kill` is SIGKILL; an invocation it interrupts fails with :class:`ContainerDied`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from stepcrawl.emulator.lambda_runtime.bridge import AwsBridge
from stepcrawl.emulator.lambda_runtime.crash_points import ChaosCrash
from stepcrawl.emulator.lambda_runtime.forking import fork_server
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec

__all__ = [
    "ContainerDied",
    "ContainerProcess",
    "HandlerError",
    "container_environment",
]

#: Of the runtime's environment, what a container's interpreter needs (Lambda sets its own
#: equivalents); everything else stays out.
_INHERITED: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "SYSTEMROOT")
#: How long a container may take to start and import its handler. Lambda allows 10 s; a
#: loaded test machine imports slower, and a slow start is not what local runs check.
INIT_BOUND: Final = 120.0


class HandlerError(Exception):
    """The handler raised (in its container): its type's name, message and traceback."""

    def __init__(self, error_type: str, message: str, trace: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type, self.message, self.trace = error_type, message, trace


class ContainerDied(Exception):  # noqa: N818 - what happened, as Lambda's log says it
    """The container process ended during an invocation (killed past its timeout or memory,
    or it crashed): Lambda's ``Runtime exited``."""


def _server_environment() -> dict[str, str]:
    """What an interpreter of ours needs (the fork server's whole environment, and the base
    of a container's): :data:`_INHERITED`, and where the library is (Lambda's equivalent:
    ``PYTHONPATH=/var/runtime:/opt/python``)."""
    return {k: os.environ[k] for k in _INHERITED if k in os.environ} | {
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)
    }


def container_environment(spec: FunctionSpec, *, region: str, log_stream: str) -> dict[str, str]:
    """The environment a container of ``spec`` starts with (see the module docstring)."""
    reserved = {
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_VERSION": spec.version,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": log_stream,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
        # No developer profile, region or credentials from ~/.aws: the function's own only.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    session = dict(spec.credentials()) if spec.credentials is not None else {}
    return _server_environment() | reserved | dict(spec.environment) | session


class ContainerProcess:
    """One container of a function (see the module docstring); callable as its handler."""

    def __init__(
        self,
        spec: FunctionSpec,
        name: str,
        *,
        bridge: AwsBridge,
        environment: Mapping[str, str],
        report: str | None = None,
        preload: tuple[str, ...] = (),
    ) -> None:
        self.spec, self.name = spec, name
        self.lines = 0  # project lines the last chaos-traced invocation ran
        self.report: Any = None  # what the container's report reference said last
        self.init_ms = 0.0  # the cold start: process start to handler imported
        self._killed: str | None = None
        self._stopping = threading.Lock()
        self._stopped = False
        started = time.perf_counter()
        server = fork_server(tuple(preload), _server_environment())
        ours, theirs = socket.socketpair()
        outputs = [socket.socketpair() for _ in ("stdout", "stderr")]
        try:
            self._pid = server.fork(
                environment, [theirs.fileno(), outputs[0][1].fileno(), outputs[1][1].fileno()]
            )
        finally:
            theirs.close()
            for _, child in outputs:
                child.close()
        self._control = Connection(ours.detach())
        self._readers = [
            self._relay(mine, stream)
            for stream, (mine, _) in zip(("stdout", "stderr"), outputs, strict=True)
        ]
        self._control.send(
            {
                "name": name,
                "handler": spec.handler,
                "bridge": bridge.address,
                "authkey": bridge.authkey,
                "report": report,
            }
        )
        answer = self._receive(INIT_BOUND, during="init")
        if answer[0] != "ready":
            self.kill("init failed")
            raise RuntimeError(f"{spec.name}: the handler failed to initialise:\n{answer[1]}")
        self.init_ms = (time.perf_counter() - started) * 1000

    def _relay(self, source: socket.socket, stream: str) -> threading.Thread:
        # sys.stdout as it is at each line: local mode swaps it while its cloud runs.
        def copy() -> None:
            with source, source.makefile("rb") as lines:
                for raw in lines:
                    with contextlib.suppress(ValueError):  # a stream closed at exit
                        getattr(sys, stream).write(raw.decode("utf-8", errors="replace"))

        thread = threading.Thread(target=copy, name=f"{self.name}-{stream}", daemon=True)
        thread.start()
        return thread

    @property
    def pid(self) -> int:
        return self._pid

    def _exited(self) -> bool:
        """Whether the process is gone (its fork server reaps it at once)."""
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._exited():
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(0.01)

    @property
    def ended(self) -> bool:
        """Whether it was killed or has exited (it takes no further invocation)."""
        return self._killed is not None or self._exited()

    def _receive(self, bound: float, *, during: str) -> tuple[Any, ...]:
        """The container's next answer; :class:`ContainerDied` if it ended first."""
        try:
            if not self._control.poll(bound):
                self.kill(f"no answer during {during} after {bound:.0f} s")
            else:
                answer: tuple[Any, ...] = self._control.recv()
                return answer
        except (EOFError, OSError):
            pass
        self._join(INIT_BOUND)
        reason = self._killed or "it exited"
        raise ContainerDied(f"{self.spec.name}: Runtime exited ({reason}) during {during}")

    def run(self, event: dict[str, Any], context: Any, *, crash_at: int | None = None) -> Any:
        """One invocation: the handler's result, :class:`HandlerError` if it raised,
        :class:`ContainerDied` if the container was killed, :class:`ChaosCrash` if chaos
        killed it (``crash_at``)."""
        fields = {
            "function_name": context.function_name,
            "function_version": context.function_version,
            "invoked_function_arn": context.invoked_function_arn,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "aws_request_id": context.aws_request_id,
            "log_group_name": context.log_group_name,
            "log_stream_name": context.log_stream_name,
            "remaining_s": context.get_remaining_time_in_millis() / 1000,
        }
        try:
            self._control.send(("invoke", json.dumps(event), fields, crash_at))
        except OSError:
            self._join(INIT_BOUND)
            raise ContainerDied(f"{self.spec.name}: Runtime exited before the invocation") from None
        # The reaper kills a container past its timeout; this bound only guards a lost one.
        answer = self._receive(self.spec.timeout + INIT_BOUND, during="the invocation")
        if answer[0] == "crash":
            self._join(INIT_BOUND)
            raise ChaosCrash(answer[1])
        self.report = answer[-1]
        self.lines = int(answer[-2])
        if answer[0] == "ok":
            return json.loads(answer[1])
        raise HandlerError(answer[1], answer[2], answer[3])

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        return self.run(event, context)

    def rss_mb(self) -> float:
        """The process's resident memory (Linux: ``/proc``; 0 elsewhere)."""
        try:
            pages = int(Path(f"/proc/{self.pid}/statm").read_text("ascii").split()[1])
        except (OSError, ValueError, IndexError):
            return 0.0
        return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)

    def kill(self, reason: str = "killed") -> None:
        """SIGKILL, as Lambda ends a sandbox; an invocation running fails."""
        if self._killed is None:
            self._killed = reason
        with contextlib.suppress(ProcessLookupError, OSError):
            os.kill(self.pid, signal.SIGKILL)

    def stop(self, timeout: float = 5.0) -> None:
        """End the container (idle, or the runtime stops): asked to, then killed. Once."""
        with self._stopping:
            if self._stopped:
                return
            self._stopped = True
        with contextlib.suppress(OSError):
            self._control.send(("stop",))
        self._join(timeout)
        if not self._exited():
            self.kill("stopped")
            self._join(INIT_BOUND)
        for reader in self._readers:
            reader.join(timeout)
        self._control.close()
