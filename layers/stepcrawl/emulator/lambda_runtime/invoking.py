"""Running a batch on a function's container, and what Lambda does with the outcome.

On success the batch is deleted, except, with ``report_batch_item_failures``, the listed
``batchItemFailures`` (:func:`failed_ids`). On an exception or a timeout nothing is deleted:
the batch comes back after the queue's visibility timeout, and moto's redrive policy moves it
to the DLQ after ``maxReceiveCount`` receives.

Past its timeout (or its memory) the invocation fails and its slot is freed at once, and its
container process is killed (SIGKILL), as Lambda ends the sandbox: whatever the handler was
doing stops. A handler given as a callable runs on a thread, which cannot be killed: it
finishes in the background and its result is ignored.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.emulator.lambda_runtime.chaos import Chaos, crash_reason, plan_crash, run_crashing
from stepcrawl.emulator.lambda_runtime.containers import Function
from stepcrawl.emulator.lambda_runtime.mapping import Invocation, MappingState
from stepcrawl.emulator.lambda_runtime.processes import ContainerProcess, HandlerError
from stepcrawl.emulator.lambda_runtime.specs import Message
from stepcrawl.emulator.lambda_runtime.sqs_calls import change_visibility, delete
from stepcrawl.emulator.lambda_runtime.sqs_event import LambdaContext, failed_ids, sqs_event
from stepcrawl.emulator.lambda_runtime.tracker import Tracker

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["Invoker"]

log = logging.getLogger(__name__)

#: Seconds between two looks at the running containers' memory.
_MEMORY_EVERY: Final = 0.25


@dataclass
class Invoker:
    """Invokes handlers for mappings (and directly), settles each invocation once, and fails
    those past their function's timeout (:meth:`reap`, a thread of its own).

    ``context`` makes an invocation's context object; ``closed`` is set at stop, after which
    abandoned invocations must not touch the queue (the emulator may be gone).
    """

    sqs: SQSClient
    tracker: Tracker
    context: Callable[[Function, str | None], LambdaContext]
    _: KW_ONLY
    chaos: Chaos | None
    closed: threading.Event

    def dispatch(self, mapping: MappingState, messages: list[Message]) -> None:
        """Start an invocation of ``messages`` on one of the function's containers."""
        invocation = Invocation(str(uuid.uuid4()), messages, crash=plan_crash(self.chaos, mapping))
        with mapping.cond:
            mapping.in_flight += 1
            mapping.max_concurrent = max(mapping.max_concurrent, mapping.in_flight)
            mapping.counts.invocations += 1
            mapping.counts.messages += len(messages)
        self.tracker.started(mapping, invocation)
        mapping.function.containers.submit(lambda: self._invoke(mapping, invocation))

    def call(self, function: Function, event: dict[str, Any], invocation: Invocation) -> Any:
        """Run the handler on the calling worker's container (a cold start on its first)."""
        handler = function.containers.handler(function.new_handler)
        process = handler if isinstance(handler, ContainerProcess) else None
        invocation.container = process
        context = self.context(function, invocation.request_id)
        invocation.deadline = time.monotonic() + function.spec.timeout  # from the handler's start
        try:
            if invocation.crash is not None:
                return run_crashing(function, handler, event, context, invocation.crash)
            return handler(event, context)
        finally:
            if process is not None:
                function.containers.record(process)

    def reap(self) -> None:
        """Fail invocations past their function's timeout or memory, kill their containers
        and free their slots."""
        memory_due = 0.0
        while not self.closed.is_set():
            now = time.monotonic()
            for mapping, invocation in self.tracker.expire(now):
                timeout = mapping.function.spec.timeout
                log.warning("%s: task timed out after %s s", mapping.spec.function, timeout)
                if invocation.container is not None:
                    invocation.container.kill(f"Task timed out after {timeout} seconds")
                with mapping.cond:
                    mapping.counts.timeouts += 1
                mapping.failed(f"Task timed out after {timeout} seconds")
                self._finish(mapping, invocation)
            if now >= memory_due:
                memory_due = now + _MEMORY_EVERY
                self._kill_over_memory()
            time.sleep(0.02)

    def _kill_over_memory(self) -> None:
        """Lambda's ``Runtime.OutOfMemory``: a container past its memory size is killed."""
        for mapping, invocation in self.tracker.running():
            process = invocation.container
            limit = mapping.function.spec.memory_mb
            if process is not None and (used := process.rss_mb()) > limit:
                log.warning("%s: %.0f MB used of %d MB", mapping.spec.function, used, limit)
                process.kill(f"Runtime.OutOfMemory: {used:.0f} MB used of {limit} MB")

    def _invoke(self, mapping: MappingState, invocation: Invocation) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            event = sqs_event(invocation.messages, mapping.arn)
            result = self.call(mapping.function, event, invocation)
        except BaseException as exc:  # noqa: BLE001 - a failed invocation, as on Lambda
            error = exc
        containers = mapping.function.containers
        if not self.tracker.settle(invocation):  # timed out meanwhile: the result is ignored,
            containers.retire()  # the container discarded (killed, as Lambda kills it)
            return
        ended = invocation.container is not None and invocation.container.ended
        try:
            if invocation.crash is not None:  # whatever the handler did: the sandbox died
                self._crashed(mapping, invocation, error)
            else:
                self._complete(mapping, invocation, result, error)
        finally:
            if ended:  # killed (out of memory, chaos) or crashed: the next one starts cold
                containers.retire()
            else:
                containers.reusable()
            self._finish(mapping, invocation)

    def _complete(
        self,
        mapping: MappingState,
        invocation: Invocation,
        result: Any,
        error: BaseException | None,
    ) -> None:
        messages = invocation.messages
        if error is not None:
            log.warning(
                "%s failed (%d messages return after the visibility timeout): %r%s",
                mapping.spec.function,
                len(messages),
                error,
                f"\n{error.trace}" if isinstance(error, HandlerError) else "",
                exc_info=None if isinstance(error, HandlerError) else error,
            )
            mapping.failed(f"{type(error).__name__}: {error}")
            return
        keep: set[str] = set()
        if mapping.spec.report_batch_item_failures:
            failed = failed_ids(result, {m["MessageId"] for m in messages})
            if failed is None:
                mapping.failed(f"invalid batchItemFailures: {result!r}"[:500])
                return
            keep = failed
            with mapping.cond:
                mapping.counts.failed_items += len(failed)
        if not self.closed.is_set():
            delete(self.sqs, mapping, [m for m in messages if m["MessageId"] not in keep])

    def _crashed(
        self, mapping: MappingState, invocation: Invocation, error: BaseException | None
    ) -> None:
        reason = crash_reason(error)
        log.info(
            "%s: %s (%d messages return)", mapping.spec.function, reason, len(invocation.messages)
        )
        with mapping.cond:
            mapping.counts.chaos_crashes += 1
            mapping.counts.failures += 1
            mapping.last_error = reason
        if self.chaos is not None and not self.closed.is_set():  # the shortcut: see Chaos
            seconds = max(0, round(self.chaos.redelivery_after))
            change_visibility(self.sqs, mapping, invocation.messages, seconds)

    def _finish(self, mapping: MappingState, invocation: Invocation) -> None:
        self.tracker.finished(invocation)
        with mapping.cond:
            mapping.in_flight -= 1
            mapping.cond.notify_all()
