"""A function's containers: warm ones re-used, a new one (a cold start) when all are busy.

Each container is driven by a worker thread of the runtime (named ``lambda-<function>-<n>``)
that takes one invocation at a time, as a Lambda container does. A handler given as
``"path/to/handler.py:handler"`` runs in a container *process* the worker owns
(:class:`~.processes.ContainerProcess`): started on the worker's first invocation (the first
one of each function at :meth:`LambdaRuntime.start`, so a broken handler fails there), with
the function's own environment and globals, killed when its invocation times out (the worker
then retires) and stopped once idle for ``idle_timeout`` seconds, as Lambda reclaims idle
sandboxes. A handler given as a callable (tests) runs on the worker thread itself, in this
process and its environment, shared as is.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stepcrawl.emulator.lambda_runtime.processes import ContainerProcess
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec, Handler
from stepcrawl.emulator.lambda_runtime.sqs_event import new_log_stream

__all__ = ["Containers", "Function", "StartContainer"]

#: Starts a container process of a function: (spec, container name, log stream) -> process.
StartContainer = Callable[[FunctionSpec, str, str], ContainerProcess]


class Containers:
    """A function's worker threads, each one container; a job with no idle one starts one."""

    def __init__(self, function: str, version: str, *, idle_timeout: float = 600.0) -> None:
        self._function = function
        self._version = version
        self._idle_timeout = idle_timeout
        self._jobs: deque[Callable[[], None] | None] = deque()
        self._ready = threading.Semaphore(0)
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._local = threading.local()
        self._processes: set[ContainerProcess] = set()
        self.cold_starts = 0
        self.idle_stops = 0
        self.init_ms: list[float] = []  # each container process's cold start
        self._usage: dict[str, Any] = {}  # per container, what its report said last

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.append(job)
        self._ready.release()
        if self._idle.acquire(blocking=False):
            return
        with self._lock:
            self.cold_starts += 1
            thread = threading.Thread(
                target=self._work,
                name=f"lambda-{self._function}-{self.cold_starts}",
                daemon=True,
            )
            self._threads.append(thread)
        thread.start()

    def handler(self, load: Callable[[], Handler]) -> Handler:
        """The current container's handler, loaded (its cold start) on its first invocation."""
        handler: Handler | None = getattr(self._local, "handler", None)
        if handler is None:
            handler = load()
            self._local.handler = handler
            if isinstance(handler, ContainerProcess):
                self.adopt(handler)
        return handler

    def adopt(self, process: ContainerProcess) -> None:
        """Count a container process started for this function (stopped at :meth:`close`)."""
        with self._lock:
            if process not in self._processes:
                self._processes.add(process)
                self.init_ms.append(process.init_ms)

    def record(self, process: ContainerProcess) -> None:
        """Keep what a container process reported after an invocation."""
        if process.report is not None:
            with self._lock:
                self._usage[process.name] = process.report

    def reports(self) -> dict[str, Any]:
        """What each container process reported last, by container name."""
        with self._lock:
            return dict(self._usage)

    @property
    def log_stream(self) -> str:
        """The current container's log stream name (one per container)."""
        stream: str | None = getattr(self._local, "stream", None)
        if stream is None:
            stream = new_log_stream(self._version)
            self._local.stream = stream
        return stream

    def retire(self) -> None:
        """Called on a container whose invocation timed out: it is killed (if a process) and
        takes no further jobs."""
        self._local.retired = True
        self._end(kill=True)

    def _end(self, *, kill: bool) -> None:
        process = getattr(self._local, "handler", None)
        if isinstance(process, ContainerProcess):
            with self._lock:
                self._processes.discard(process)
            if kill:
                process.kill("retired")
            process.stop()

    def reusable(self) -> None:
        """Called by a job just before it frees its concurrency slot: the next job submitted
        for that slot then finds this container warm instead of starting a new one."""
        if not getattr(self._local, "idle", True):
            self._local.idle = True
            self._idle.release()

    def _work(self) -> None:
        while True:
            if not self._ready.acquire(timeout=self._idle_timeout):
                if self._idle.acquire(blocking=False):  # nobody counts on this one: it ends
                    self._end(kill=False)
                    with self._lock:
                        self.idle_stops += 1
                    return
                continue  # a job was submitted for it meanwhile: take it
            job = self._jobs.popleft()
            if job is None:
                self._end(kill=False)
                return
            self._local.idle = False
            job()
            if getattr(self._local, "retired", False):
                return
            self.reusable()

    def init_summary(self) -> dict[str, float]:
        """The container processes' cold starts: how many, median and slowest (ms)."""
        with self._lock:
            values = list(self.init_ms)
        if not values:
            return {"containers": 0}
        return {
            "containers": len(values),
            "median_ms": round(statistics.median(values), 1),
            "max_ms": round(max(values), 1),
        }

    def close(self) -> None:
        with self._lock:
            alive = [t for t in self._threads if t.is_alive()]
            processes = list(self._processes)
        for _ in alive:
            self._jobs.append(None)
            self._ready.release()
        for process in processes:  # a busy one ends when killed; an idle one is asked first
            process.stop(timeout=2.0)


@dataclass
class Function:
    """A deployed function: its spec, its containers and how to start one."""

    spec: FunctionSpec
    containers: Containers
    start: StartContainer | None = None  # for a handler given as a reference
    spare: list[Handler] = field(default_factory=list)  # initialised, no worker yet
    lock: threading.Lock = field(default_factory=threading.Lock)
    lines: int = 0  # the longest run (in project lines) a chaos-traced invocation showed

    def new_handler(self) -> Handler:
        """A handler for a new container: a process importing the handler (its init phase),
        or the callable itself."""
        reference = self.spec.handler
        if not isinstance(reference, str):
            return reference
        with self.lock:
            if self.spare:
                return self.spare.pop()
        assert self.start is not None
        name = threading.current_thread().name
        return self.start(self.spec, name, self.containers.log_stream)
