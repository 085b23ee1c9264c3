"""A local Lambda service for SQS event-source mappings, against moto (in-process or server).

It plays what Lambda does for a queue-triggered function, so that the very handlers of
``functions/*/handler.py`` run offline, unchanged:

* **Polling.** One poller thread per mapping receives with ``WaitTimeSeconds=0`` (explicitly: a
  queue's own ``ReceiveMessageWaitTimeSeconds`` would otherwise make moto long-poll) and
  sleeps when the queue is empty, backing off from ``idle_interval`` to ``idle_max``. moto's
  ``ReceiveMessage`` costs O(queue depth), so calls are kept few: with no batching window one
  receive fetches up to ``min(10, batch_size x free slots)`` messages and splits them into
  batches; with a window, receives continue until ``batch_size`` messages, 6 MB of payload or
  the end of the window (counted from the first message), as Lambda does.
* **Concurrency.** At most ``max_concurrency`` invocations of a mapping run at once (a value,
  or a callable re-read on every poll loop so that a scaler's change bites at once; lowering
  it lets in-flight invocations finish). Invocations run on a function's *containers*: daemon
  worker threads, re-used while warm, a new one (a cold start) when all are busy.
* **Results.** The exact SQS event (``Records`` with attributes, message attributes, ARN,
  region) and a context object like Lambda's. On success the batch is deleted, except, with
  ``report_batch_item_failures``, the listed ``batchItemFailures`` (an unknown, empty or
  missing ``itemIdentifier`` fails the whole batch, as on AWS). On an exception or a timeout
  nothing is deleted: the batch comes back after the queue's visibility timeout, and moto's
  redrive policy moves it to the DLQ after ``maxReceiveCount`` receives.
* **Timeouts.** A thread cannot be killed: a handler past its timeout is abandoned, i.e. the
  invocation fails, its slot is freed and its container is retired; the thread finishes in
  the background and its result is ignored (Lambda would have killed the sandbox); until
  it ends, its environment group keeps the gate (below).
* **Containers.** Each container (worker thread) runs its own init phase: a handler given as
  ``"path/to/handler.py:handler"`` is imported once per container, as its own module, with the
  function's environment applied (the first one at :meth:`start`, so a broken handler fails
  there). Module state such as Powertools' ``BatchProcessor`` is therefore never shared by
  two concurrent invocations, as on Lambda. What lives in library modules imported by name
  (``functools.cache``'d clients, loops) is per process, however: such caches must be
  thread-local to be per container here (on Lambda, a container runs one invocation at a
  time, so a thread-local is equivalent). A handler given as a callable is shared as is.

Chaos (tests only). ``chaos=Chaos(...)`` injects the faults AWS may inflict, to prove the
handlers' at-least-once safety. A *crash* (``crash_rate`` of a mapping's invocations; a direct
:meth:`LambdaRuntime.invoke` has none) kills the invocation, evenly often before the handler,
inside it or after it returned but before the runtime's delete: inside, a trace function on
the invocation's thread raises ``_ChaosCrash`` (a ``BaseException``, so ``except Exception``
does not take it for an ordinary error) at the N-th line run in project code (one whose crash
cannot skip a ``with`` exit, a ``finally`` or the gap after an ``acquire()``: the lock would
stay held, as a killed sandbox's would not); the standard library, site-packages (moto,
botocore) and ``stepcrawl.local`` are skipped, since AWS's APIs are atomic and a crash in them
could corrupt the emulator or leak its locks. N is uniform up to twice the longest run seen,
so a point past the end kills the invocation after return. A crashed invocation fails and
deletes nothing; as a chaos-only shortcut its messages become visible again after
``redelivery_after`` seconds (on AWS: the queue's visibility timeout). A *duplicate*
(``duplicate_rate`` of received messages) is delivered once more in another invocation,
possibly concurrently: same message id, body and receipt handle, so one of the two deletes is
stale (moto accepts it; a rejected delete of a duplicated message is not counted as an
error). ``seed`` makes the fault
sequence of each mapping reproducible when its invocations run one at a time.

Environment variables. ``os.environ`` is one per process, while every Lambda function has
its own. Keys with the same value in every function are set once, at :meth:`start`. The rest
are applied by an *environment gate*: functions with identical remaining variables form a
group; invocations of one group run concurrently, and a group with a different environment
waits until the running group has drained, then the variables are swapped (groups take turns
in arrival order, so neither starves). So a handler never sees another function's variables,
at the price of serialising functions whose environments differ. Measured on the 2-core box
(two functions, 80 messages each, batch 1, concurrency 4 each): handlers sleeping 50 ms took
2.5 s with identical environments and 3.5 s with differing ones; handlers of 200 ms (40
messages each) 2.5 s against 5.0 s, i.e. the two functions simply took turns. Make the
environments identical where possible (stepcrawl's differ only in ``POWERTOOLS_SERVICE_NAME``,
which the handlers also pass as ``service=``): then there is no gate at all. Threads outside
the runtime see whichever group's variables are applied; everything is restored at
:meth:`stop`. Lambda's reserved variables (``AWS_LAMBDA_FUNCTION_NAME``, ...) are not set:
they differ per function and would always serialise; the context object carries them.

moto costs that shaped the polling (in-process ``mock_aws`` / ThreadedMotoServer, 2 cores):
an empty receive 1.4 / 8.9 ms; receiving 1 message at depth 40: 6 / 14 ms, 10 messages:
15 / 17 ms; at depth 100: 24 / 25 ms and 100 / 83 ms; at depth 1,000: 172 / 125 ms and
1.3 / 1.2 s. ``GetQueueAttributes`` (used by :meth:`LambdaRuntime.wait_idle`) is O(depth)
as well: 2-3 ms on a short queue, 357 ms at depth 1,000. ``DeleteMessageBatch`` of 10:
3-8 ms. An idle mapping backs off from 20 to 250 ms between receives: three idle mappings
make 12 receives a second, 4% of a core in-process, 10% through the server.
"""

from __future__ import annotations

import base64
import dis
import functools
import importlib.util
import logging
import os
import random
import re
import sys
import sysconfig
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import CodeType, FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from boto3.session import Session
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

__all__ = [
    "Chaos",
    "FunctionSpec",
    "LambdaContext",
    "LambdaRuntime",
    "MappingSpec",
    "MappingStats",
    "load_handler",
    "sqs_event",
]

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
Message = dict[str, Any]

#: Lambda's synchronous invocation payload limit, which also bounds an SQS batch.
MAX_PAYLOAD: Final = 6 * 1024 * 1024
#: Rough JSON overhead of one record besides its body (ids, attributes, ARN).
_RECORD_OVERHEAD: Final = 1024
_ACCOUNT: Final = "123456789012"
#: Chaos: a handler's length in project lines, assumed until a traced invocation shows it.
_CHAOS_LINES: Final = 25
#: Where a chaos crash never lands (see the module docstring), with a trailing separator.
_UNTRACED: Final = tuple(
    {
        f"{Path(p).resolve()}{os.sep}"
        for p in (
            *(sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")),
            str(Path(__file__).parent),
        )
    }
)


# --------------------------------------------------------------------------------------------
# Specifications
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function: its handler and configuration.

    ``handler`` is a callable ``(event, context) -> dict | None`` or a reference
    ``"path/to/handler.py:handler"`` (relative paths are resolved against the working
    directory). ``timeout`` is in seconds (fractions allowed locally), ``memory_mb`` is what
    the context reports.
    """

    name: str
    handler: Handler | str
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 3.0
    memory_mb: int = 128
    version: str = "$LATEST"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(f"invalid function name {self.name!r}")
        if self.timeout <= 0:
            raise ValueError(f"function {self.name}: timeout must be positive")
        if not 128 <= self.memory_mb <= 10_240:
            raise ValueError(f"function {self.name}: memory_mb must be within 128..10240")
        for key, value in self.environment.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"function {self.name}: environment must map str to str")


@dataclass(frozen=True)
class MappingSpec:
    """An SQS event-source mapping (``CreateEventSourceMapping``'s settings that matter).

    ``max_concurrency`` and ``enabled`` may be callables; they are re-read on every poll loop.
    ``None`` concurrency means the runtime's ``concurrency_cap``. AWS's bounds are checked
    (batch size 1..10,000; a window of at least 1 s above 10 messages; window <= 300 s),
    except that a maximum concurrency of 1 is allowed locally (AWS: 2..1000).
    """

    function: str
    queue_url: str
    batch_size: int = 10
    maximum_batching_window: float = 0.0
    max_concurrency: int | Callable[[], int] | None = None
    report_batch_item_failures: bool = False
    enabled: bool | Callable[[], bool] = True

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"mapping {self.key}: batch_size must be within 1..10000")
        if not 0 <= self.maximum_batching_window <= 300:
            raise ValueError(f"mapping {self.key}: maximum_batching_window must be 0..300 s")
        if self.batch_size > 10 and self.maximum_batching_window < 1:
            raise ValueError(
                f"mapping {self.key}: a batch_size above 10 needs a maximum_batching_window "
                "of at least 1 second (as on AWS)"
            )
        if isinstance(self.max_concurrency, int) and self.max_concurrency < 1:
            raise ValueError(f"mapping {self.key}: max_concurrency must be at least 1")

    @property
    def queue_name(self) -> str:
        return self.queue_url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def key(self) -> str:
        """``function:queue-name``, the mapping's name in :meth:`LambdaRuntime.stats`."""
        return f"{self.function}:{self.queue_name}"


@dataclass(frozen=True)
class Chaos:
    """Faults the runtime injects (tests only; see the module docstring).

    ``crash_rate`` of invocations crash at a random point, ``duplicate_rate`` of received
    messages are delivered twice; ``seed`` makes the sequence reproducible; a crashed batch
    is visible again after ``redelivery_after`` seconds (rounded: SQS takes whole seconds).
    """

    crash_rate: float = 0.0
    duplicate_rate: float = 0.0
    seed: int | None = None
    redelivery_after: float = 1.0

    def __post_init__(self) -> None:
        if not (0 <= self.crash_rate <= 1 and 0 <= self.duplicate_rate <= 1):
            raise ValueError("chaos rates must be within 0..1")
        if self.redelivery_after < 0:
            raise ValueError("chaos redelivery_after must not be negative")


@dataclass(frozen=True)
class MappingStats:
    """Counters of one mapping (a snapshot).

    ``failures`` counts failed invocations (exception, timeout, invalid partial response);
    ``failed_items`` the messages a successful invocation reported in ``batchItemFailures``.
    ``chaos_crashes`` (also failures) and ``chaos_duplicates`` count injected faults.
    """

    key: str
    function: str
    queue_url: str
    invocations: int = 0
    messages: int = 0
    failures: int = 0
    timeouts: int = 0
    failed_items: int = 0
    deleted: int = 0
    receives: int = 0
    empty_receives: int = 0
    errors: int = 0
    in_flight: int = 0
    max_concurrent: int = 0
    concurrency_limit: int = 0
    last_error: str | None = None
    chaos_crashes: int = 0
    chaos_duplicates: int = 0


# --------------------------------------------------------------------------------------------
# Event and context
# --------------------------------------------------------------------------------------------


class LambdaContext:
    """What the Python runtime passes as ``context`` (Powertools' ``LambdaContext`` shape)."""

    def __init__(
        self,
        spec: FunctionSpec,
        *,
        region: str,
        account: str,
        request_id: str | None = None,
        log_stream_name: str | None = None,
    ) -> None:
        self.function_name = spec.name
        self.function_version = spec.version
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account}:function:{spec.name}"
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = log_stream_name or _log_stream_name(spec.version)
        self.identity: Any = None
        self.client_context: Any = None
        self.tenant_id: str | None = None
        self._deadline = time.monotonic() + spec.timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _log_stream_name(version: str) -> str:
    day = datetime.now(UTC).strftime("%Y/%m/%d")
    return f"{day}/[{version}]{uuid.uuid4().hex}"


def _message_attributes(raw: Mapping[str, Any]) -> dict[str, Any]:
    """boto3's ``MessageAttributes`` -> the event's camelCase form (binary as base64)."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        attribute: dict[str, Any] = {
            "stringListValues": list(value.get("StringListValues", [])),
            "binaryListValues": [
                base64.b64encode(v).decode("ascii") for v in value.get("BinaryListValues", [])
            ],
            "dataType": value["DataType"],
        }
        if "StringValue" in value:
            attribute["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        out[name] = attribute
    return out


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda delivers for ``messages`` (``ReceiveMessage`` entries) of a queue."""
    region = queue_arn.split(":")[3]
    records = []
    for m in messages:
        record: dict[str, Any] = {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": dict(m.get("Attributes", {})),
            "messageAttributes": _message_attributes(m.get("MessageAttributes", {})),
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }
        if "MD5OfMessageAttributes" in m:
            record["md5OfMessageAttributes"] = m["MD5OfMessageAttributes"]
        records.append(record)
    return {"Records": records}


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


# --------------------------------------------------------------------------------------------
# Environment gate
# --------------------------------------------------------------------------------------------

Group = tuple[tuple[str, str], ...]


class _EnvGate:
    """Lets invocations of one environment group in at a time (see the module docstring)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = sorted(set(keys))
        self._cond = threading.Condition()
        self._current: Group | None = None
        self._active = 0
        self._turns: deque[Group] = deque()
        self._waiting: Counter[Group] = Counter()
        self._passes = 0
        self._saved: dict[str, str | None] = {}
        self.switches = 0

    @property
    def trivial(self) -> bool:
        return not self._keys

    def enter(self, group: Group) -> None:
        if self.trivial:
            return
        with self._cond:
            self._waiting[group] += 1
            try:
                while not self._admit(group):
                    if group not in self._turns:
                        self._turns.append(group)
                    self._cond.wait()
            finally:
                self._waiting[group] -= 1
            self._active += 1

    def leave(self) -> None:
        if self.trivial:
            return
        with self._cond:
            self._active -= 1
            if self._active == 0 and self._turns:
                self._cond.notify_all()

    def _admit(self, group: Group) -> bool:
        if self._current == group:
            if not self._turns:
                return True
            if self._turns[0] == group:
                self._turns.popleft()
                return True
            if self._passes > 0:  # a waiter of the batch admitted at the last switch
                self._passes -= 1
                return True
            return False
        if self._active == 0 and (not self._turns or self._turns[0] == group):
            if self._turns:
                self._turns.popleft()
            self._apply(group)
            self._passes = self._waiting[group] - 1
            self._cond.notify_all()
            return True
        return False

    def _apply(self, group: Group) -> None:
        if not self._saved:
            self._saved = {k: os.environ.get(k) for k in self._keys}
        values = dict(group)
        for key in self._keys:
            value = values.get(key, self._saved[key])
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._current = group
        self.switches += 1

    def restore(self) -> None:
        with self._cond:
            for key, value in self._saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved = {}
            self._current = None


# --------------------------------------------------------------------------------------------
# Containers
# --------------------------------------------------------------------------------------------


class _Containers:
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
            stream = _log_stream_name(self._version)
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


# --------------------------------------------------------------------------------------------
# Chaos
# --------------------------------------------------------------------------------------------

_Trace = Callable[[FrameType, str, Any], Any]


class _ChaosCrash(BaseException):
    """The sandbox was killed. Not an ``Exception``: a handler's ``except Exception`` must not
    take it for an ordinary error and carry on."""


@functools.lru_cache(maxsize=4096)
def _traced(filename: str) -> bool:
    """Whether a chaos crash may land in this file (project code; see the module docstring)."""
    return not filename.startswith("<") and not str(Path(filename).resolve()).startswith(_UNTRACED)


@functools.lru_cache(maxsize=4096)
def _crash_lines(code: CodeType) -> frozenset[int]:
    """The lines of ``code`` a crash may land on: those compiled to one stretch of bytecode,
    not only NOPs. Left out: a ``with`` (its exit runs after the body, unprotected), a
    ``finally`` clause (compiled twice) and a ``try:`` (right after, say, an ``acquire()``),
    where a crash would skip the cleanup and leak a lock that other containers share (a
    killed sandbox's locks die with it)."""
    stretches: Counter[int] = Counter()
    previous = None
    for _start, _end, line in code.co_lines():
        if line is not None and line != previous:
            stretches[line] += 1
        previous = line
    busy = {
        i.positions.lineno
        for i in dis.get_instructions(code)
        if i.opname != "NOP" and i.positions is not None
    }
    return frozenset(line for line, n in stretches.items() if n == 1 and line in busy)


class _Tracer:
    """A trace function for one invocation's thread: counts the lines run in project code
    (:func:`_crash_lines`) and raises :class:`_ChaosCrash` at line ``at``. Python unsets a
    trace function that raises, so the crash fires once; a handler catching
    ``BaseException`` goes on (the runtime still deletes nothing)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.lines = 0

    def call(self, frame: FrameType, _event: str, _arg: Any) -> _Trace | None:
        if not _traced(frame.f_code.co_filename):
            return None
        allowed = _crash_lines(frame.f_code)  # once per call: hashing a code object is slow

        def line(frame: FrameType, event: str, _arg: Any) -> _Trace | None:
            if event == "line" and frame.f_lineno in allowed:
                self.lines += 1
                if self.lines == self.at:
                    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                    raise _ChaosCrash(f"chaos: killed after {self.at} lines, at {where}")
            return line

        return line


# --------------------------------------------------------------------------------------------
# Functions and mappings
# --------------------------------------------------------------------------------------------


@dataclass
class _Function:
    spec: FunctionSpec
    group: Group
    containers: _Containers
    spare: list[Handler] = field(default_factory=list)  # initialised, no container yet
    inits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    lines: int = 0  # the longest run (in project lines) a chaos-traced invocation showed


@dataclass
class _Invocation:
    request_id: str
    messages: list[Message]
    deadline: float = float("inf")
    done: bool = False
    # Chaos: None, or where the invocation dies: 0 before the handler, n > 0 at its n-th
    # project line (after it returned if it runs fewer), -1 after it returned.
    crash: int | None = None


class _Mapping:
    def __init__(
        self, spec: MappingSpec, function: _Function, arn: str, fifo: bool, seed: int | None
    ) -> None:
        self.spec = spec
        self.function = function
        self.arn = arn
        self.fifo = fifo
        self.cond = threading.Condition()
        self.ready: deque[list[Message]] = deque()  # received batches waiting for a slot
        self.counts: Counter[str] = Counter()
        self.in_flight = 0
        self.max_concurrent = 0
        self.limit = 1
        self.last_error: str | None = None
        self.thread: threading.Thread | None = None
        # Chaos: a stream per fault kind, so that one kind's draws do not shift the other's
        # (S311: reproducible faults, not secrets).
        tag = None if seed is None else f"{seed}:{spec.key}"
        self.crash_rng = random.Random(tag and f"{tag}:crash")  # noqa: S311
        self.duplicate_rng = random.Random(tag and f"{tag}:duplicate")  # noqa: S311
        self.duplicated: set[str] = set()  # ids of the messages delivered twice

    def stats(self) -> MappingStats:
        with self.cond:
            return MappingStats(
                key=self.spec.key,
                function=self.spec.function,
                queue_url=self.spec.queue_url,
                in_flight=self.in_flight,
                max_concurrent=self.max_concurrent,
                concurrency_limit=self.limit,
                last_error=self.last_error,
                invocations=self.counts["invocations"],
                messages=self.counts["messages"],
                failures=self.counts["failures"],
                timeouts=self.counts["timeouts"],
                failed_items=self.counts["failed_items"],
                deleted=self.counts["deleted"],
                receives=self.counts["receives"],
                empty_receives=self.counts["empty_receives"],
                errors=self.counts["errors"],
                chaos_crashes=self.counts["chaos_crashes"],
                chaos_duplicates=self.counts["chaos_duplicates"],
            )


def _failed_ids(response: Any, batch_ids: set[str]) -> set[str] | None:
    """The ids to keep per a partial batch response; ``None``: the whole batch failed."""
    if not isinstance(response, dict):
        return set()
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return None
    ids: set[str] = set()
    for failure in failures:
        ident = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(ident, str) or ident not in batch_ids:
            return None
        ids.add(ident)
    return ids


def _record_size(message: Mapping[str, Any]) -> int:
    return len(message["Body"]) + len(message["ReceiptHandle"]) + _RECORD_OVERHEAD


# --------------------------------------------------------------------------------------------
# The runtime
# --------------------------------------------------------------------------------------------


class LambdaRuntime:
    """Plays the Lambda service for SQS event-source mappings; see the module docstring.

    Give an SQS client (``sqs``) or a boto3 session (and optionally ``endpoint_url``, e.g. a
    ThreadedMotoServer's). ``concurrency_cap`` bounds every mapping's concurrency and is the
    value of an unset ``max_concurrency``. ``chaos`` injects faults (tests only).
    """

    def __init__(
        self,
        functions: Iterable[FunctionSpec],
        mappings: Iterable[MappingSpec] = (),
        *,
        sqs: SQSClient | None = None,
        session: Session | None = None,
        endpoint_url: str | None = None,
        concurrency_cap: int = 64,
        idle_interval: float = 0.02,
        idle_max: float = 0.25,
        stop_timeout: float = 10.0,
        chaos: Chaos | None = None,
    ) -> None:
        if sqs is None:
            if session is None:
                raise ValueError("give an SQS client (sqs=) or a boto3 session (session=)")
            sqs = session.client("sqs", endpoint_url=endpoint_url)
        self.sqs: SQSClient = sqs
        self.concurrency_cap = concurrency_cap
        self.idle_interval = idle_interval
        self.idle_max = idle_max
        self.stop_timeout = stop_timeout
        self.chaos = chaos
        self._function_specs: dict[str, FunctionSpec] = {}
        for spec in functions:
            if spec.name in self._function_specs:
                raise ValueError(f"function {spec.name} is defined twice")
            self._function_specs[spec.name] = spec
        self._mapping_specs = list(mappings)
        for m in self._mapping_specs:
            if m.function not in self._function_specs:
                raise ValueError(f"mapping {m.key}: no function named {m.function}")
        keys = Counter(m.key for m in self._mapping_specs)
        if any(n > 1 for n in keys.values()):
            raise ValueError(f"duplicate mappings: {sorted(k for k, n in keys.items() if n > 1)}")
        self._shared_env, groups = self._split_environments()
        self._gate = _EnvGate(k for group in groups.values() for k, _ in group)
        self._functions = {
            name: _Function(spec, groups[name], _Containers(name, spec.version))
            for name, spec in self._function_specs.items()
        }
        self._mappings: dict[str, _Mapping] = {}
        self._saved_env: dict[str, str | None] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, tuple[_Mapping, _Invocation]] = {}
        self._activity = 0
        self._reaper: threading.Thread | None = None
        self._started = False
        self._closed = False
        self.region = "us-east-1"
        self.account = _ACCOUNT

    # ---- environment -------------------------------------------------------------------

    def _split_environments(self) -> tuple[dict[str, str], dict[str, Group]]:
        specs = list(self._function_specs.values())
        shared: dict[str, str] = {}
        if specs:
            first = specs[0].environment
            shared = {
                k: v for k, v in first.items() if all(s.environment.get(k) == v for s in specs)
            }
        groups = {
            s.name: tuple(sorted((k, v) for k, v in s.environment.items() if k not in shared))
            for s in specs
        }
        return shared, groups

    @property
    def environment_switches(self) -> int:
        """How often the gate swapped environments (0 when all functions share theirs)."""
        return self._gate.switches

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> LambdaRuntime:
        """Check the mappings, import the handlers (init phase) and start polling."""
        if self._started:
            raise RuntimeError("the runtime was already started")
        self._started = True
        try:
            mappings = [self._resolve(spec) for spec in self._mapping_specs]
            self._saved_env = {k: os.environ.get(k) for k in self._shared_env}
            os.environ.update(self._shared_env)
            for function in self._functions.values():
                self._init(function)
        except BaseException:
            self._restore_env()
            self._closed = True
            raise
        for mapping in mappings:
            self._mappings[mapping.spec.key] = mapping
        self._reaper = threading.Thread(target=self._reap, name="lambda-reaper", daemon=True)
        self._reaper.start()
        for mapping in self._mappings.values():
            mapping.thread = threading.Thread(
                target=self._poll, args=(mapping,), name=f"poller-{mapping.spec.key}", daemon=True
            )
            mapping.thread.start()
        return self

    def _resolve(self, spec: MappingSpec) -> _Mapping:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=spec.queue_url, AttributeNames=["QueueArn", "VisibilityTimeout", "FifoQueue"]
        )["Attributes"]
        arn = attributes["QueueArn"]
        _, _, _, self.region, self.account, _ = arn.split(":", 5)
        function = self._functions[spec.function]
        visibility = int(attributes.get("VisibilityTimeout", "30"))
        if visibility < function.spec.timeout:
            raise ValueError(
                f"mapping {spec.key}: queue visibility timeout {visibility} s is less than "
                f"function timeout {function.spec.timeout} s (AWS refuses this mapping)"
            )
        fifo = attributes.get("FifoQueue") == "true"
        if fifo and (spec.batch_size > 10 or spec.maximum_batching_window):
            raise ValueError(f"mapping {spec.key}: a FIFO queue allows batch_size <= 10, no window")
        return _Mapping(spec, function, arn, fifo, self.chaos.seed if self.chaos else None)

    def _init(self, function: _Function) -> None:
        """The first container's init phase, at start: a broken handler fails early."""
        if isinstance(function.spec.handler, str):
            self._gate.enter(function.group)
            try:
                function.spare.append(self._load(function))
            finally:
                self._gate.leave()

    def _load(self, function: _Function) -> Handler:
        """A handler for a new container: its own copy of the module (its init phase)."""
        reference = function.spec.handler
        if not isinstance(reference, str):
            return reference
        with function.lock:
            if function.spare:
                return function.spare.pop()
            function.inits += 1
            module = f"_stepcrawl_lambda_{function.spec.name.replace('-', '_')}_{function.inits}"
        return load_handler(reference, module)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop polling, hand back buffered messages, wait for in-flight invocations.

        Returns ``False`` if some were still running after ``timeout`` seconds (they are
        abandoned: their results are ignored and nothing more is deleted).
        """
        if not self._started or self._closed:
            return True
        bound = self.stop_timeout if timeout is None else timeout
        deadline = time.monotonic() + bound
        self._stopping.set()
        for mapping in self._mappings.values():
            if mapping.thread is not None:
                mapping.thread.join(max(0.0, deadline - time.monotonic()))
            self._release(mapping)
        drained = True
        for mapping in self._mappings.values():
            with mapping.cond:
                while mapping.in_flight and time.monotonic() < deadline:
                    mapping.cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                drained = drained and mapping.in_flight == 0
        self._closed = True
        if self._reaper is not None:
            self._reaper.join(1.0)
        for function in self._functions.values():
            function.containers.close()
        self._restore_env()
        return drained

    def _restore_env(self) -> None:
        self._gate.restore()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def __enter__(self) -> LambdaRuntime:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- observability -----------------------------------------------------------------

    def stats(self) -> dict[str, MappingStats]:
        """Counters per mapping, keyed by :attr:`MappingSpec.key` (``function:queue``)."""
        return {key: mapping.stats() for key, mapping in self._mappings.items()}

    def cold_starts(self) -> dict[str, int]:
        """Containers (worker threads) started per function."""
        return {name: f.containers.cold_starts for name, f in self._functions.items()}

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._running)

    def wait_idle(
        self, queues: Iterable[str] | None = None, timeout: float = 30.0, interval: float = 0.05
    ) -> None:
        """Return once ``queues`` (default: every mapped queue) are empty (visible, in
        flight and delayed messages) and no invocation runs; ``TimeoutError`` otherwise."""
        urls = list(queues) if queues is not None else [m.queue_url for m in self._mapping_specs]
        deadline = time.monotonic() + timeout
        depths: dict[str, int] = {}
        while True:
            before = self._busy()
            if before is not None:
                depths = {url: self._depth(url) for url in urls}
                if not any(depths.values()) and self._busy() == before:
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"not idle after {timeout} s: {self.in_flight} invocations in flight, "
                    f"queue depths {depths}"
                )
            time.sleep(interval)

    def _busy(self) -> int | None:
        """The activity counter when nothing is in flight or buffered, else ``None``."""
        with self._lock:
            if self._running or any(m.ready for m in self._mappings.values()):
                return None
            return self._activity

    def _depth(self, queue_url: str) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    # ---- direct invocation -------------------------------------------------------------

    def invoke(self, function: str, event: dict[str, Any]) -> Any:
        """A synchronous ``Invoke`` (RequestResponse), e.g. for a scheduled function.

        Runs on one of the function's containers with its environment; re-raises the
        handler's exception, ``TimeoutError`` past the function's timeout.
        """
        if not self._started or self._closed:
            raise RuntimeError("the runtime is not running")
        target = self._functions.get(function)
        if target is None:
            raise ValueError(f"no function named {function}")
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def job() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = self._call(target, event, None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                outcome["error"] = exc
            done.set()
            if time.monotonic() - started > target.spec.timeout:
                target.containers.retire()

        target.containers.submit(job)
        if not done.wait(target.spec.timeout + 0.05):
            raise TimeoutError(f"{function}: task timed out after {target.spec.timeout} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("result")

    # ---- polling -----------------------------------------------------------------------

    def _concurrency(self, mapping: _Mapping) -> int:
        setting = mapping.spec.max_concurrency
        try:
            value = setting() if callable(setting) else setting
        except Exception:
            log.exception("max_concurrency of %s failed", mapping.spec.key)
            return mapping.limit
        limit = self.concurrency_cap if value is None else value
        return max(1, min(int(limit), self.concurrency_cap))

    def _enabled(self, mapping: _Mapping) -> bool:
        setting = mapping.spec.enabled
        try:
            return bool(setting() if callable(setting) else setting)
        except Exception:
            log.exception("enabled of %s failed", mapping.spec.key)
            return False

    def _poll(self, mapping: _Mapping) -> None:
        idle = self.idle_interval
        while not self._stopping.is_set():
            if not self._enabled(mapping):
                self._stopping.wait(self.idle_max)
                continue
            limit = self._concurrency(mapping)
            with mapping.cond:
                mapping.limit = limit
                free = limit - mapping.in_flight
                if free <= 0:
                    mapping.cond.wait(0.05)
                    continue
            with self._lock:
                batch = mapping.ready.popleft() if mapping.ready else None
            if batch is not None:
                self._dispatch(mapping, batch)
                continue
            try:
                received = self._gather(mapping, free)
            except Exception as exc:  # noqa: BLE001 - e.g. the queue was deleted
                log.warning("receive from %s failed: %s", mapping.spec.queue_url, exc)
                with mapping.cond:
                    mapping.counts["errors"] += 1
                    mapping.last_error = f"receive: {exc}"
                self._stopping.wait(self.idle_max)
                continue
            if not received:
                self._stopping.wait(idle)
                idle = min(idle * 2, self.idle_max)
                continue
            idle = self.idle_interval
            duplicates = self._duplicates(mapping, received)
            with self._lock:
                self._activity += 1
                mapping.ready.extend(self._split(mapping, received))
                mapping.ready.extend(self._split(mapping, duplicates))  # in other invocations

    def _receive(self, mapping: _Mapping, count: int) -> list[Message]:
        response = self.sqs.receive_message(
            QueueUrl=mapping.spec.queue_url,
            MaxNumberOfMessages=count,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages: list[MessageTypeDef] = response.get("Messages", [])
        with mapping.cond:
            mapping.counts["receives"] += 1
            if not messages:
                mapping.counts["empty_receives"] += 1
        return [dict(m) for m in messages]

    def _gather(self, mapping: _Mapping, free: int) -> list[Message]:
        spec = mapping.spec
        if not spec.maximum_batching_window:
            # Enough for every free slot in one call (moto's receive costs O(depth)).
            return self._receive(mapping, min(10, spec.batch_size * free))
        batch = self._receive(mapping, min(10, spec.batch_size))
        if not batch:
            return batch
        size = sum(_record_size(m) for m in batch)
        end = time.monotonic() + spec.maximum_batching_window
        pause = self.idle_interval
        while len(batch) < spec.batch_size and size < MAX_PAYLOAD:
            if time.monotonic() >= end or self._stopping.is_set():
                break
            more = self._receive(mapping, min(10, spec.batch_size - len(batch)))
            batch += more
            size += sum(_record_size(m) for m in more)
            if more:
                pause = self.idle_interval
            else:
                self._stopping.wait(max(0.0, min(pause, end - time.monotonic())))
                pause = min(pause * 2, self.idle_max)
        return batch

    def _split(self, mapping: _Mapping, messages: list[Message]) -> Iterator[list[Message]]:
        """Batches of at most ``batch_size`` messages and 6 MB each."""
        batch: list[Message] = []
        size = 0
        for message in messages:
            record = _record_size(message)
            if batch and (len(batch) >= mapping.spec.batch_size or size + record > MAX_PAYLOAD):
                yield batch
                batch, size = [], 0
            batch.append(message)
            size += record
        if batch:
            yield batch

    def _release(self, mapping: _Mapping) -> None:
        """Make buffered, never-invoked messages visible again (the runtime is stopping)."""
        with self._lock:
            batches = list(mapping.ready)
            mapping.ready.clear()
        self._set_visibility(mapping, [m for batch in batches for m in batch], 0)

    def _set_visibility(self, mapping: _Mapping, messages: list[Message], seconds: int) -> None:
        """Best effort: a failed entry (e.g. a duplicate already deleted) simply stays."""
        for i in range(0, len(messages), 10):
            chunk = messages[i : i + 10]
            try:
                self.sqs.change_message_visibility_batch(
                    QueueUrl=mapping.spec.queue_url,
                    Entries=[
                        {
                            "Id": str(n),
                            "ReceiptHandle": m["ReceiptHandle"],
                            "VisibilityTimeout": seconds,
                        }
                        for n, m in enumerate(chunk)
                    ],
                )
            except Exception as exc:  # noqa: BLE001 - they come back after the timeout anyway
                log.warning("changing the visibility in %s failed: %s", mapping.spec.key, exc)

    # ---- chaos -------------------------------------------------------------------------

    def _duplicates(self, mapping: _Mapping, received: list[Message]) -> list[Message]:
        """Copies of some received messages, to deliver once more (at-least-once delivery)."""
        chaos = self.chaos
        if chaos is None or not chaos.duplicate_rate:
            return []
        rng = mapping.duplicate_rng
        copies = [dict(m) for m in received if rng.random() < chaos.duplicate_rate]
        if copies:
            with mapping.cond:
                mapping.counts["chaos_duplicates"] += len(copies)
                mapping.duplicated.update(m["MessageId"] for m in copies)
        return copies

    def _plan_crash(self, mapping: _Mapping) -> int | None:
        """Whether and where an invocation dies (:attr:`_Invocation.crash`)."""
        chaos = self.chaos
        if chaos is None or not chaos.crash_rate:
            return None
        rng = mapping.crash_rng
        if rng.random() >= chaos.crash_rate:
            return None
        point = rng.randrange(3)  # before, inside or after the handler, evenly
        if point == 1:  # twice the longest run seen: the bound follows the handler's length
            return rng.randint(1, 2 * max(mapping.function.lines, _CHAOS_LINES))
        return 0 if point == 0 else -1

    def _run_crashing(
        self, function: _Function, handler: Handler, event: dict[str, Any], context: Any, at: int
    ) -> Any:
        """Run ``handler`` in an invocation chaos kills at ``at`` (:attr:`_Invocation.crash`)."""
        if at == 0:
            raise _ChaosCrash("chaos: killed before the handler ran")
        if at < 0:
            return handler(event, context)
        tracer = _Tracer(at)
        previous = sys.gettrace()  # e.g. a debugger's or coverage's, put back after
        sys.settrace(tracer.call)  # this thread only
        try:
            return handler(event, context)
        finally:
            sys.settrace(previous)
            with function.lock:
                function.lines = max(function.lines, tracer.lines)

    def _crashed(
        self, mapping: _Mapping, invocation: _Invocation, error: BaseException | None
    ) -> None:
        reason = str(error) if isinstance(error, _ChaosCrash) else None
        reason = reason or "chaos: killed after the handler ended, before the delete"
        log.info(
            "%s: %s (%d messages return)", mapping.spec.function, reason, len(invocation.messages)
        )
        with mapping.cond:
            mapping.counts["chaos_crashes"] += 1
            mapping.counts["failures"] += 1
            mapping.last_error = reason
        if self.chaos is not None and not self._closed:  # the shortcut: see Chaos
            seconds = max(0, round(self.chaos.redelivery_after))
            self._set_visibility(mapping, invocation.messages, seconds)

    # ---- invoking ----------------------------------------------------------------------

    def _dispatch(self, mapping: _Mapping, messages: list[Message]) -> None:
        invocation = _Invocation(str(uuid.uuid4()), messages, crash=self._plan_crash(mapping))
        with mapping.cond:
            mapping.in_flight += 1
            mapping.max_concurrent = max(mapping.max_concurrent, mapping.in_flight)
            mapping.counts["invocations"] += 1
            mapping.counts["messages"] += len(messages)
        with self._lock:
            self._running[invocation.request_id] = (mapping, invocation)
        mapping.function.containers.submit(lambda: self._invoke(mapping, invocation))

    def _call(
        self, function: _Function, event: dict[str, Any], invocation: _Invocation | None
    ) -> Any:
        """Run the handler with the function's environment (gate held around it only)."""
        self._gate.enter(function.group)
        try:
            handler = function.containers.handler(lambda: self._load(function))
            context = LambdaContext(
                function.spec,
                region=self.region,
                account=self.account,
                request_id=invocation.request_id if invocation else None,
                log_stream_name=function.containers.log_stream,
            )
            if invocation is not None:  # the clock starts when the handler does
                invocation.deadline = time.monotonic() + function.spec.timeout
                if invocation.crash is not None:
                    return self._run_crashing(function, handler, event, context, invocation.crash)
            return handler(event, context)
        finally:
            self._gate.leave()

    def _invoke(self, mapping: _Mapping, invocation: _Invocation) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            event = sqs_event(invocation.messages, mapping.arn)
            result = self._call(mapping.function, event, invocation)
        except BaseException as exc:  # noqa: BLE001 - a failed invocation, as on Lambda
            error = exc
        with self._lock:
            if invocation.done:  # timed out meanwhile: the result is ignored, the container
                mapping.function.containers.retire()  # is discarded (Lambda kills it)
                return
            invocation.done = True
        try:
            if invocation.crash is not None:  # whatever the handler did: the sandbox died
                self._crashed(mapping, invocation, error)
            else:
                self._complete(mapping, invocation, result, error)
        finally:
            mapping.function.containers.reusable()
            self._finish(mapping, invocation)

    def _complete(
        self,
        mapping: _Mapping,
        invocation: _Invocation,
        result: Any,
        error: BaseException | None,
    ) -> None:
        messages = invocation.messages
        if error is not None:
            log.warning(
                "%s failed (%d messages return after the visibility timeout): %r",
                mapping.spec.function,
                len(messages),
                error,
                exc_info=error,
            )
            self._failed(mapping, f"{type(error).__name__}: {error}")
            return
        keep: set[str] = set()
        if mapping.spec.report_batch_item_failures:
            failed = _failed_ids(result, {m["MessageId"] for m in messages})
            if failed is None:
                self._failed(mapping, f"invalid batchItemFailures: {result!r}"[:500])
                return
            keep = failed
            with mapping.cond:
                mapping.counts["failed_items"] += len(failed)
        self._delete(mapping, [m for m in messages if m["MessageId"] not in keep])

    def _failed(self, mapping: _Mapping, reason: str) -> None:
        with mapping.cond:
            mapping.counts["failures"] += 1
            mapping.last_error = reason

    def _delete(self, mapping: _Mapping, messages: list[Message]) -> None:
        if self._closed:
            return  # abandoned at stop: the emulator may be gone
        for i in range(0, len(messages), 10):
            chunk = messages[i : i + 10]
            try:
                response = self.sqs.delete_message_batch(
                    QueueUrl=mapping.spec.queue_url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                        for n, m in enumerate(chunk)
                    ],
                )
            except Exception as exc:  # noqa: BLE001 - the messages simply come back
                log.warning("delete from %s failed: %s", mapping.spec.queue_url, exc)
                with mapping.cond:
                    mapping.counts["errors"] += 1
                continue
            with mapping.cond:
                mapping.counts["deleted"] += len(response.get("Successful", []))
                # A duplicate's other delivery may have deleted it first: moto then rejects a
                # later receive's handle (AWS ignores a stale one).
                failed = [chunk[int(f["Id"])]["MessageId"] for f in response.get("Failed", [])]
                mapping.counts["errors"] += sum(i not in mapping.duplicated for i in failed)

    def _finish(self, mapping: _Mapping, invocation: _Invocation) -> None:
        with self._lock:
            self._running.pop(invocation.request_id, None)
            self._activity += 1
        with mapping.cond:
            mapping.in_flight -= 1
            mapping.cond.notify_all()

    def _reap(self) -> None:
        """Fail invocations past their function's timeout and free their slots."""
        while not self._closed:
            now = time.monotonic()
            expired: list[tuple[_Mapping, _Invocation]] = []
            with self._lock:
                for mapping, invocation in self._running.values():
                    if not invocation.done and invocation.deadline < now:
                        invocation.done = True
                        expired.append((mapping, invocation))
            for mapping, invocation in expired:
                timeout = mapping.function.spec.timeout
                log.warning("%s: task timed out after %s s", mapping.spec.function, timeout)
                with mapping.cond:
                    mapping.counts["timeouts"] += 1
                self._failed(mapping, f"Task timed out after {timeout} seconds")
                self._finish(mapping, invocation)
            time.sleep(0.02)
