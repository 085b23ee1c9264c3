"""The local Lambda service: its lifecycle, direct invocations and observability."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from stepcrawl.emulator.lambda_runtime.bridge import AwsBridge
from stepcrawl.emulator.lambda_runtime.chaos import Chaos
from stepcrawl.emulator.lambda_runtime.containers import Containers, Function
from stepcrawl.emulator.lambda_runtime.invoking import Invoker
from stepcrawl.emulator.lambda_runtime.mapping import Invocation, MappingState
from stepcrawl.emulator.lambda_runtime.polling import Poller
from stepcrawl.emulator.lambda_runtime.processes import (
    ContainerProcess,
    container_environment,
)
from stepcrawl.emulator.lambda_runtime.specs import FunctionSpec, MappingSpec
from stepcrawl.emulator.lambda_runtime.sqs_event import LambdaContext
from stepcrawl.emulator.lambda_runtime.stats import MappingStats
from stepcrawl.emulator.lambda_runtime.tracker import Tracker
from stepcrawl.emulator.server import ACCOUNT

if TYPE_CHECKING:
    from boto3.session import Session
    from mypy_boto3_sqs import SQSClient

__all__ = ["LambdaRuntime"]


class LambdaRuntime:
    """Plays the Lambda service for SQS event-source mappings; see the package docstring.

    Give an SQS client (``sqs``) or a boto3 session (and optionally ``endpoint_url``, e.g. a
    ThreadedMotoServer's). ``concurrency_cap`` bounds every mapping's concurrency and is the
    value of an unset ``max_concurrency``. ``chaos`` injects faults (tests only). A container
    process is stopped after ``idle_timeout`` seconds without an invocation; after each
    invocation it sends what ``container_report`` (``"module:function"``, imported in the
    container) returns, kept per container (:meth:`container_reports`).
    ``batching_window_scale`` (0 < scale <= 1) plays every mapping's batching window at that
    share of its length (local runs may shorten them; Lambda waits the whole window).
    ``preload`` names modules the containers' fork server imports once (besides the
    third-party libraries it always does), so that a cold start does not pay for them.
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
        idle_timeout: float = 600.0,
        container_report: str | None = None,
        batching_window_scale: float = 1.0,
        preload: Sequence[str] = (),
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
        if not 0 < batching_window_scale <= 1:
            raise ValueError("batching_window_scale must be within (0, 1]")
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
        self._container_report = container_report
        self._preload = tuple(preload)
        self._bridge: AwsBridge | None = None
        self._functions = {
            name: Function(
                spec,
                Containers(name, spec.version, idle_timeout=idle_timeout),
                self._start_container,
            )
            for name, spec in self._function_specs.items()
        }
        self._mappings: dict[str, MappingState] = {}
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._tracker = Tracker()
        self._invoker = Invoker(sqs, self._tracker, self._context, chaos=chaos, closed=self._closed)
        self._poller = Poller(
            sqs,
            self._tracker,
            self._invoker.dispatch,
            stopping=self._stopping,
            concurrency_cap=concurrency_cap,
            idle_interval=idle_interval,
            idle_max=idle_max,
            chaos=chaos,
            window_scale=batching_window_scale,
        )
        self._reaper: threading.Thread | None = None
        self._started = False
        self.region = "us-east-1"
        self.account = ACCOUNT

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> LambdaRuntime:
        """Check the mappings, import the handlers (init phase) and start polling."""
        if self._started:
            raise RuntimeError("the runtime was already started")
        self._started = True
        try:
            mappings = [self._resolve(spec) for spec in self._mapping_specs]
            self._init_all()
        except BaseException:
            self._closed.set()
            for function in self._functions.values():
                function.containers.close()
            if self._bridge is not None:
                self._bridge.close()
            raise
        for mapping in mappings:
            self._mappings[mapping.spec.key] = mapping
        self._reaper = threading.Thread(
            target=self._invoker.reap, name="lambda-reaper", daemon=True
        )
        self._reaper.start()
        for mapping in self._mappings.values():
            mapping.thread = threading.Thread(
                target=self._poller.run,
                args=(mapping,),
                name=f"poller-{mapping.spec.key}",
                daemon=True,
            )
            mapping.thread.start()
        return self

    def _resolve(self, spec: MappingSpec) -> MappingState:
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
        return MappingState(spec, function, arn, fifo, self.chaos.seed if self.chaos else None)

    def _init_all(self) -> None:
        """Each function's provisioned containers (its first, or more), started at once
        (their init phases overlap): a broken handler fails here, not at its first message."""
        referenced = [f for f in self._functions.values() if isinstance(f.spec.handler, str)]
        if not referenced:
            return
        self._bridge = AwsBridge()
        errors: list[BaseException] = []

        def init(function: Function, n: int) -> None:
            name = f"lambda-{function.spec.name}-p{n}"
            try:
                process = self._start_container(function.spec, name, function.containers.log_stream)
            except BaseException as exc:  # noqa: BLE001 - raised below, once all are done
                errors.append(exc)
                return
            function.containers.adopt(process)
            with function.lock:
                function.spare.append(process)

        threads = [
            threading.Thread(target=init, args=(f, n), daemon=True)
            for f in referenced
            for n in range(f.spec.provisioned)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _start_container(self, spec: FunctionSpec, name: str, log_stream: str) -> ContainerProcess:
        assert self._bridge is not None
        environment = container_environment(spec, region=self.region, log_stream=log_stream)
        return ContainerProcess(
            spec,
            name,
            bridge=self._bridge,
            environment=environment,
            report=self._container_report,
            preload=self._preload,
        )

    def _context(self, function: Function, request_id: str | None) -> LambdaContext:
        """The context of an invocation on the calling container."""
        return LambdaContext(
            function.spec,
            region=self.region,
            account=self.account,
            request_id=request_id,
            log_stream_name=function.containers.log_stream,
        )

    def stop(self, timeout: float | None = None) -> bool:
        """Stop polling, hand back buffered messages, wait for in-flight invocations.

        Returns ``False`` if some were still running after ``timeout`` seconds (they are
        abandoned: their results are ignored and nothing more is deleted).
        """
        if not self._started or self._closed.is_set():
            return True
        bound = self.stop_timeout if timeout is None else timeout
        deadline = time.monotonic() + bound
        self._stopping.set()
        for mapping in self._mappings.values():
            if mapping.thread is not None:
                mapping.thread.join(max(0.0, deadline - time.monotonic()))
            self._poller.release(mapping)
        drained = True
        for mapping in self._mappings.values():
            with mapping.cond:
                while mapping.in_flight and time.monotonic() < deadline:
                    mapping.cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                drained = drained and mapping.in_flight == 0
        self._closed.set()
        if self._reaper is not None:
            self._reaper.join(1.0)
        for function in self._functions.values():
            function.containers.close()
        if self._bridge is not None:
            self._bridge.close()
        return drained

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

    def functions(self) -> list[str]:
        """The names of the functions this runtime plays."""
        return list(self._functions)

    def cold_starts(self) -> dict[str, int]:
        """Containers started per function (by invocations; the first, started at
        :meth:`start`, is the first of them)."""
        return {name: f.containers.cold_starts for name, f in self._functions.items()}

    def init_durations(self) -> dict[str, dict[str, float]]:
        """Per function, its container processes' measured cold starts (process start to
        handler imported): how many, the median and the slowest, in ms."""
        return {name: f.containers.init_summary() for name, f in self._functions.items()}

    def container_reports(self) -> dict[str, Any]:
        """What each container process's ``container_report`` said last, by container name."""
        reports: dict[str, Any] = {}
        for function in self._functions.values():
            reports.update(function.containers.reports())
        return reports

    @property
    def in_flight(self) -> int:
        return self._tracker.in_flight

    def wait_idle(
        self, queues: Iterable[str] | None = None, timeout: float = 30.0, interval: float = 0.05
    ) -> None:
        """Return once ``queues`` (default: every mapped queue) are empty (visible, in
        flight and delayed messages) and no invocation runs; ``TimeoutError`` otherwise."""
        urls = list(queues) if queues is not None else [m.queue_url for m in self._mapping_specs]
        deadline = time.monotonic() + timeout
        depths: dict[str, int] = {}
        while True:
            before = self._tracker.quiet()
            if before is not None:
                depths = {url: self._depth(url) for url in urls}
                if not any(depths.values()) and self._tracker.quiet() == before:
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"not idle after {timeout} s: {self.in_flight} invocations in flight, "
                    f"queue depths {depths}"
                )
            time.sleep(interval)

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
        if not self._started or self._closed.is_set():
            raise RuntimeError("the runtime is not running")
        target = self._functions.get(function)
        if target is None:
            raise ValueError(f"no function named {function}")
        done = threading.Event()
        outcome: dict[str, Any] = {}
        invocation = Invocation(str(uuid.uuid4()), [])

        def job() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = self._invoker.call(target, event, invocation)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                outcome["error"] = exc
            done.set()
            late = time.monotonic() - started > target.spec.timeout
            if late or (invocation.container is not None and invocation.container.ended):
                target.containers.retire()

        target.containers.submit(job)
        if not done.wait(target.spec.timeout + 0.05):
            if invocation.container is not None:  # Lambda ends the sandbox
                invocation.container.kill(f"Task timed out after {target.spec.timeout} seconds")
            raise TimeoutError(f"{function}: task timed out after {target.spec.timeout} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("result")
