"""The local Lambda service: its lifecycle, direct invocations and observability."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from stepcrawl.emulator.lambda_runtime.chaos import Chaos
from stepcrawl.emulator.lambda_runtime.containers import Containers, Function
from stepcrawl.emulator.lambda_runtime.environment import (
    EnvGate,
    put_environ,
    saved_environ,
    split_environments,
)
from stepcrawl.emulator.lambda_runtime.invoking import Invoker
from stepcrawl.emulator.lambda_runtime.mapping import MappingState
from stepcrawl.emulator.lambda_runtime.polling import Poller
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
        self._shared_env, groups = split_environments(list(self._function_specs.values()))
        self._gate = EnvGate(k for group in groups.values() for k, _ in group)
        self._functions = {
            name: Function(spec, groups[name], Containers(name, spec.version))
            for name, spec in self._function_specs.items()
        }
        self._mappings: dict[str, MappingState] = {}
        self._saved_env: dict[str, str | None] = {}
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._tracker = Tracker()
        self._invoker = Invoker(
            sqs, self._tracker, self._gate, self._context, chaos=chaos, closed=self._closed
        )
        self._poller = Poller(
            sqs,
            self._tracker,
            self._invoker.dispatch,
            stopping=self._stopping,
            concurrency_cap=concurrency_cap,
            idle_interval=idle_interval,
            idle_max=idle_max,
            chaos=chaos,
        )
        self._reaper: threading.Thread | None = None
        self._started = False
        self.region = "us-east-1"
        self.account = ACCOUNT

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
            self._saved_env = saved_environ(self._shared_env)
            os.environ.update(self._shared_env)
            for function in self._functions.values():
                self._init(function)
        except BaseException:
            self._restore_env()
            self._closed.set()
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

    def _init(self, function: Function) -> None:
        """The first container's init phase, at start: a broken handler fails early."""
        if isinstance(function.spec.handler, str):
            with self._gate.entered(function.group):
                function.spare.append(function.new_handler())

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
        self._restore_env()
        return drained

    def _restore_env(self) -> None:
        self._gate.restore()
        put_environ(self._saved_env)
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

    def functions(self) -> list[str]:
        """The names of the functions this runtime plays."""
        return list(self._functions)

    def cold_starts(self) -> dict[str, int]:
        """Containers (worker threads) started per function."""
        return {name: f.containers.cold_starts for name, f in self._functions.items()}

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

        def job() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = self._invoker.call(target, event, None)
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
