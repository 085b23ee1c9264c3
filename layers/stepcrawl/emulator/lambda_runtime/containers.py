"""A function's containers: warm worker threads, each with its own copy of the handler.

Invocations run on *containers*: daemon worker threads, re-used while warm, a new one (a cold
start) when all are busy. Each container runs its own init phase: a handler given as
``"path/to/handler.py:handler"`` is imported once per container, as its own module, with the
function's environment applied (the first one at :meth:`LambdaRuntime.start`, so a broken
handler fails there). Module state such as Powertools' ``BatchProcessor`` is therefore never
shared by two concurrent invocations, as on Lambda. What lives in library modules imported by
name (``functools.cache``'d clients, loops) is per process, however: such caches must be
thread-local to be per container here (on Lambda, a container runs one invocation at a time,
so a thread-local is equivalent). A handler given as a callable is shared as is.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stepcrawl.emulator.lambda_runtime.environment import Group
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec, Handler
from stepcrawl.emulator.lambda_runtime.sqs_event import new_log_stream

__all__ = ["Containers", "Function", "load_handler"]


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


class Containers:
    """A function's warm worker threads; a job with no idle thread starts a new one."""

    def __init__(self, function: str, version: str) -> None:
        self._function = function
        self._version = version
        self._jobs: deque[Callable[[], None] | None] = deque()
        self._ready = threading.Semaphore(0)
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._local = threading.local()
        self.cold_starts = 0

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
        """The current container's handler, loaded on its first invocation."""
        handler: Handler | None = getattr(self._local, "handler", None)
        if handler is None:
            handler = load()
            self._local.handler = handler
        return handler

    @property
    def log_stream(self) -> str:
        """The current container's log stream name (one per worker thread)."""
        stream: str | None = getattr(self._local, "stream", None)
        if stream is None:
            stream = new_log_stream(self._version)
            self._local.stream = stream
        return stream

    def retire(self) -> None:
        """Called on a container whose handler timed out: it takes no further jobs."""
        self._local.retired = True

    def reusable(self) -> None:
        """Called by a job just before it frees its concurrency slot: the next job submitted
        for that slot then finds this container warm instead of starting a new one."""
        if not getattr(self._local, "idle", True):
            self._local.idle = True
            self._idle.release()

    def _work(self) -> None:
        while True:
            self._ready.acquire()
            job = self._jobs.popleft()
            if job is None:
                return
            self._local.idle = False
            job()
            if getattr(self._local, "retired", False):
                return
            self.reusable()

    def close(self) -> None:
        with self._lock:
            alive = [t for t in self._threads if t.is_alive()]
        for _ in alive:
            self._jobs.append(None)
            self._ready.release()


@dataclass
class Function:
    """A deployed function: its spec, environment group and containers."""

    spec: FunctionSpec
    group: Group
    containers: Containers
    spare: list[Handler] = field(default_factory=list)  # initialised, no container yet
    inits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    lines: int = 0  # the longest run (in project lines) a chaos-traced invocation showed

    def new_handler(self) -> Handler:
        """A handler for a new container: its own copy of the module (its init phase)."""
        reference = self.spec.handler
        if not isinstance(reference, str):
            return reference
        with self.lock:
            if self.spare:
                return self.spare.pop()
            self.inits += 1
            module = f"_stepcrawl_lambda_{self.spec.name.replace('-', '_')}_{self.inits}"
        return load_handler(reference, module)
