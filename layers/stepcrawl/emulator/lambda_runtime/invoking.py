"""Running a batch on a function's container, and what Lambda does with the outcome.

On success the batch is deleted, except, with ``report_batch_item_failures``, the listed
``batchItemFailures`` (:func:`failed_ids`). On an exception or a timeout nothing is deleted:
the batch comes back after the queue's visibility timeout, and moto's redrive policy moves it
to the DLQ after ``maxReceiveCount`` receives.

A thread cannot be killed: a handler past its timeout is abandoned, i.e. the invocation
fails, its slot is freed and its container is retired; the thread finishes in the background
and its result is ignored (Lambda would have killed the sandbox); until it ends, its
environment group keeps the gate (:mod:`.environment`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from stepcrawl.emulator.lambda_runtime.chaos import Chaos, crash_reason, plan_crash, run_crashing
from stepcrawl.emulator.lambda_runtime.containers import Function
from stepcrawl.emulator.lambda_runtime.environment import EnvGate
from stepcrawl.emulator.lambda_runtime.mapping import Invocation, MappingState
from stepcrawl.emulator.lambda_runtime.specs import Message
from stepcrawl.emulator.lambda_runtime.sqs_calls import change_visibility, delete
from stepcrawl.emulator.lambda_runtime.sqs_event import LambdaContext, failed_ids, sqs_event
from stepcrawl.emulator.lambda_runtime.tracker import Tracker

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["Invoker"]

log = logging.getLogger(__name__)


@dataclass
class Invoker:
    """Invokes handlers for mappings (and directly), settles each invocation once, and fails
    those past their function's timeout (:meth:`reap`, a thread of its own).

    ``context`` makes an invocation's context object; ``closed`` is set at stop, after which
    abandoned invocations must not touch the queue (the emulator may be gone).
    """

    sqs: SQSClient
    tracker: Tracker
    gate: EnvGate
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

    def call(self, function: Function, event: dict[str, Any], invocation: Invocation | None) -> Any:
        """Run the handler with the function's environment (gate held around it only)."""
        with self.gate.entered(function.group):
            handler = function.containers.handler(function.new_handler)
            context = self.context(function, invocation.request_id if invocation else None)
            if invocation is not None:  # the clock starts when the handler does
                invocation.deadline = time.monotonic() + function.spec.timeout
                if invocation.crash is not None:
                    return run_crashing(function, handler, event, context, invocation.crash)
            return handler(event, context)

    def reap(self) -> None:
        """Fail invocations past their function's timeout and free their slots."""
        while not self.closed.is_set():
            for mapping, invocation in self.tracker.expire(time.monotonic()):
                timeout = mapping.function.spec.timeout
                log.warning("%s: task timed out after %s s", mapping.spec.function, timeout)
                with mapping.cond:
                    mapping.counts.timeouts += 1
                mapping.failed(f"Task timed out after {timeout} seconds")
                self._finish(mapping, invocation)
            time.sleep(0.02)

    def _invoke(self, mapping: MappingState, invocation: Invocation) -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            event = sqs_event(invocation.messages, mapping.arn)
            result = self.call(mapping.function, event, invocation)
        except BaseException as exc:  # noqa: BLE001 - a failed invocation, as on Lambda
            error = exc
        if not self.tracker.settle(invocation):  # timed out meanwhile: the result is ignored,
            mapping.function.containers.retire()  # the container discarded (Lambda kills it)
            return
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
        mapping: MappingState,
        invocation: Invocation,
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
