"""Polling a mapping's queue and cutting what arrives into batches.

One poller thread per mapping receives without waiting while messages come, and long-polls
(:data:`LONG_POLL` seconds, as Lambda's pollers do) once the queue is empty: a message sent
then is received at once, not after a back-off, and an empty queue costs one receive a
second. (A message becoming visible again or after its delay wakes no long poll: it is seen
at the poll's end, within a second.) Receives are kept few, since each costs
moto time that grows with the queue's depth (docs/performance.md): with no batching window
one receive fetches up to ``min(10, batch_size x free slots)`` messages and splits them into
batches; with a window, receives continue until ``batch_size`` messages, 6 MB of payload or
the end of the window (counted from the first message), as Lambda does.

At most ``max_concurrency`` invocations of a mapping run at once (a value, or a callable
re-read on every poll loop so that a scaler's change bites at once; lowering it lets
in-flight invocations finish).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Final

from stepcrawl.emulator.lambda_runtime.chaos import Chaos, duplicates, lost
from stepcrawl.emulator.lambda_runtime.mapping import MappingState
from stepcrawl.emulator.lambda_runtime.specs import Message
from stepcrawl.emulator.lambda_runtime.sqs_calls import change_visibility, delete, receive
from stepcrawl.emulator.lambda_runtime.tracker import Tracker

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["LONG_POLL", "MAX_PAYLOAD", "Poller", "split_batches"]

log = logging.getLogger(__name__)

#: Seconds an idle mapping's receive waits for a message (Lambda's pollers wait up to 20; a
#: second keeps the runtime's stop prompt).
LONG_POLL: Final = 1
#: Lambda's synchronous invocation payload limit, which also bounds an SQS batch.
MAX_PAYLOAD: Final = 6 * 1024 * 1024
#: Rough JSON overhead of one record besides its body (ids, attributes, ARN).
_RECORD_OVERHEAD: Final = 1024


def _record_size(message: Mapping[str, Any]) -> int:
    return len(message["Body"]) + len(message["ReceiptHandle"]) + _RECORD_OVERHEAD


def split_batches(messages: list[Message], batch_size: int) -> Iterator[list[Message]]:
    """Batches of at most ``batch_size`` messages and 6 MB each."""
    batch: list[Message] = []
    size = 0
    for message in messages:
        record = _record_size(message)
        if batch and (len(batch) >= batch_size or size + record > MAX_PAYLOAD):
            yield batch
            batch, size = [], 0
        batch.append(message)
        size += record
    if batch:
        yield batch


@dataclass
class Poller:
    """The poll loops of a runtime's mappings; received batches go to ``dispatch`` as slots
    free up, through the tracker's buffer."""

    sqs: SQSClient
    tracker: Tracker
    dispatch: Callable[[MappingState, list[Message]], None]
    _: KW_ONLY
    stopping: threading.Event
    concurrency_cap: int
    idle_interval: float
    idle_max: float
    chaos: Chaos | None
    window_scale: float = 1.0  # the share of each batching window played

    def run(self, mapping: MappingState) -> None:
        """A mapping's poll loop, until ``stopping`` is set."""
        wait = 0  # long-poll once the queue was found empty
        key = mapping.spec.key
        while not self.stopping.is_set():
            if not self._enabled(mapping):
                self.stopping.wait(self.idle_max)
                continue
            limit = self._concurrency(mapping)
            with mapping.cond:
                mapping.limit = limit
                free = limit - mapping.in_flight
                if free <= 0:
                    mapping.cond.wait(0.05)
                    continue
            batch = self.tracker.next_batch(key)
            if batch is not None:
                self.dispatch(mapping, batch)
                continue
            try:
                received = self._gather(mapping, free, wait)
            except Exception as exc:  # noqa: BLE001 - e.g. the queue was deleted
                log.warning("receive from %s failed: %s", mapping.spec.queue_url, exc)
                with mapping.cond:
                    mapping.counts.errors += 1
                    mapping.last_error = f"receive: {exc}"
                self.stopping.wait(self.idle_max)
                continue
            if not received:
                wait = LONG_POLL
                continue
            wait = 0
            if gone := lost(self.chaos, mapping, received):
                delete(self.sqs, mapping, gone)
                received = [m for m in received if m not in gone]
            copies = duplicates(self.chaos, mapping, received)
            size = mapping.spec.batch_size
            self.tracker.buffer(  # the copies in batches of their own: other invocations
                key, [*split_batches(received, size), *split_batches(copies, size)]
            )

    def release(self, mapping: MappingState) -> None:
        """Make buffered, never-invoked messages visible again (the runtime is stopping)."""
        batches = self.tracker.take_buffered(mapping.spec.key)
        change_visibility(self.sqs, mapping, [m for batch in batches for m in batch], 0)

    def _concurrency(self, mapping: MappingState) -> int:
        setting = mapping.spec.max_concurrency
        try:
            value = setting() if callable(setting) else setting
        except Exception:
            log.exception("max_concurrency of %s failed", mapping.spec.key)
            return mapping.limit
        limit = self.concurrency_cap if value is None else value
        return max(1, min(int(limit), self.concurrency_cap))

    def _enabled(self, mapping: MappingState) -> bool:
        setting = mapping.spec.enabled
        try:
            return bool(setting() if callable(setting) else setting)
        except Exception:
            log.exception("enabled of %s failed", mapping.spec.key)
            return False

    def _gather(self, mapping: MappingState, free: int, wait: int) -> list[Message]:
        spec = mapping.spec
        if not spec.maximum_batching_window:
            # Enough for every free slot in one call: receives are what costs.
            return receive(self.sqs, mapping, min(10, spec.batch_size * free), wait)
        batch = receive(self.sqs, mapping, min(10, spec.batch_size), wait)
        if not batch:
            return batch
        size = sum(_record_size(m) for m in batch)
        end = time.monotonic() + spec.maximum_batching_window * self.window_scale
        pause = self.idle_interval
        while len(batch) < spec.batch_size and size < MAX_PAYLOAD:
            if time.monotonic() >= end or self.stopping.is_set():
                break
            more = receive(self.sqs, mapping, min(10, spec.batch_size - len(batch)))
            batch += more
            size += sum(_record_size(m) for m in more)
            if more:
                pause = self.idle_interval
            else:
                self.stopping.wait(max(0.0, min(pause, end - time.monotonic())))
                pause = min(pause * 2, self.idle_max)
        return batch
