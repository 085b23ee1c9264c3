"""moto's SQS queues made atomic under threads, as SQS is; and its clock read cheaply.

moto keeps a queue's messages in a plain list and changes it without a lock: ``DeleteMessage``
builds a new list from the one it read and assigns it back, ``SendMessage`` appends to
whichever list is current, ``ReceiveMessage`` marks messages received one by one. Locally,
many threads call these at once (every Lambda container deletes its batch and sends its
results; the feeder sends thousands of URLs), so a delete that overlaps another delete puts
the other's message back (received, so invisible until its visibility timeout: 720 s on the
fetch queue), and a send that lands between the two is lost outright. That is what stalled
a 3,533-page local crawl with a few dozen URLs that never ended (docs/local.md, "What moto
needed"). SQS never loses a sent message nor brings back a deleted one (apart from the rare
duplicate of at-least-once delivery, which the engine tolerates by design).

Every call that changes a queue's messages takes that queue's own ``_messages_lock`` (a
``Condition`` over an ``RLock``): the very lock moto's long poll waits on, so a receive that
waits for messages releases it while it waits and a sender can still wake it. A receive that
moves messages to the dead-letter queue takes the DLQ's lock inside its own; nothing takes
them the other way round.

And SQS reads the clock through ``datetime`` twice per message per scan; a receive at depth
256 spent most of its time there. :func:`sqs_clock_patches` reads the same clock with
``time.time()``.

A receive also checked each message it returned against the queue's retention period by
asking for the queue's attributes, which moto computes in full three times per name asked
(three scans of the whole queue each, for the message counts): a receive of ten at depth
1,000 took over a second, and held the queue's lock all along, so sends and deletes waited.
:func:`sqs_depth_patches` reads the retention period itself, computes the attributes once
per ``GetQueueAttributes``, scans a queue with one clock reading, and matches receipt
handles without building a list per message. Every answer stays moto's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.core import utils as moto_utils
from moto.sqs import models as sqs_models
from moto.sqs.models import Queue, SQSBackend

__all__ = ["sqs_clock_patches", "sqs_depth_patches", "sqs_patches"]


def _locked_queue_method(original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``Queue`` method run under the queue's lock."""

    @wraps(original)
    def method(self: Queue, *args: Any, **kwargs: Any) -> Any:
        with self._messages_lock:
            return original(self, *args, **kwargs)

    return method


def _locked_backend_call(original: Callable[..., Any]) -> Callable[..., Any]:
    """An ``SQSBackend`` call on one queue (named by its first argument) under its lock."""

    @wraps(original)
    def call(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)  # raises QueueDoesNotExist as before
        with queue._messages_lock:
            return original(self, queue_name, *args, **kwargs)

    return call


def sqs_patches() -> list[tuple[object, str, Any]]:
    """The patches (owner, attribute, value) that make each queue's changes atomic."""
    return [
        (Queue, "add_message", _locked_queue_method(Queue.add_message)),
        (Queue, "delete_message", _locked_queue_method(Queue.delete_message)),
        *(
            (SQSBackend, name, _locked_backend_call(getattr(SQSBackend, name)))
            for name in ("receive_message", "change_message_visibility", "purge_queue")
        ),
    ]


def _fast_clock(original: Callable[..., float], scale: float) -> Callable[..., float]:
    def clock(dt: Any = None) -> float:
        return time.time() * scale if dt is None else original(dt)

    return clock


def sqs_clock_patches() -> list[tuple[object, str, Any]]:
    """The patches (owner, attribute, value) reading SQS's clock with ``time.time()``."""
    return [
        (sqs_models, "unix_time", _fast_clock(moto_utils.unix_time, 1.0)),
        (sqs_models, "unix_time_millis", _fast_clock(moto_utils.unix_time_millis, 1000.0)),
    ]


def _clock(name: str) -> float:
    """SQS's clock as moto's models read it (``unix_time`` or ``unix_time_millis``), at call
    time: :func:`sqs_clock_patches` replaces them."""
    read: Callable[[], float] = getattr(sqs_models, name)
    return read()


def _retention_check(self: SQSBackend, queue_name: str, message: Any) -> bool:
    """Whether ``message`` is still within its queue's retention period (moto's test)."""
    retention = int(getattr(self.get_queue(queue_name), "message_retention_period"))  # noqa: B009
    return bool(retention + message.sent_timestamp / 1000 > _clock("unix_time"))


def _queue_attributes(
    original: Callable[..., dict[str, Any]],
) -> Callable[..., dict[str, Any]]:
    """moto's ``GetQueueAttributes`` with the queue's attributes computed once, not three
    times per name asked."""

    @wraps(original)
    def get_queue_attributes(
        self: SQSBackend, queue_name: str, attribute_names: list[str]
    ) -> dict[str, Any]:
        if not attribute_names or "All" in attribute_names:
            return original(self, queue_name, attribute_names)
        queue = self.get_queue(queue_name)
        valid = {*queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES}
        if any(name not in valid for name in attribute_names):
            return original(self, queue_name, attribute_names)  # moto's own error
        attributes = queue.attributes
        return {
            name: attributes[name] for name in attribute_names if attributes.get(name) is not None
        }

    return get_queue_attributes


def _visible_messages(self: Queue) -> list[Any]:
    """The messages a receive may take: visible and past their delay (one clock reading)."""
    now = _clock("unix_time_millis")
    return [m for m in self._messages if now > m.visible_at and now >= m.delayed_until]


def _delayed_count(self: Queue) -> int:
    now = _clock("unix_time_millis")
    return sum(1 for m in self._messages if now < m.delayed_until)


def _not_visible_count(self: Queue) -> int:
    now = _clock("unix_time_millis")
    return sum(1 for m in self._messages if now <= m.visible_at)


def _had_receipt_handle(self: Any, receipt_handle: str) -> bool:
    """Whether this message ever had ``receipt_handle`` (without building a list)."""
    return bool(
        receipt_handle == self.receipt_handle or receipt_handle in self._old_receipt_handles
    )


def sqs_depth_patches() -> list[tuple[object, str, Any]]:
    """The patches (owner, attribute, value) that keep SQS calls from rescanning a queue."""
    return [
        (SQSBackend, "is_message_valid_based_on_retention_period", _retention_check),
        (SQSBackend, "get_queue_attributes", _queue_attributes(SQSBackend.get_queue_attributes)),
        (Queue, "messages", property(_visible_messages)),
        (Queue, "approximate_number_of_messages_delayed", property(_delayed_count)),
        (Queue, "approximate_number_of_messages_not_visible", property(_not_visible_count)),
        (sqs_models.Message, "had_receipt_handle", _had_receipt_handle),
    ]
