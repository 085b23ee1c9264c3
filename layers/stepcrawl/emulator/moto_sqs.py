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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.core import utils as moto_utils
from moto.sqs import models as sqs_models
from moto.sqs.models import Queue, SQSBackend

__all__ = ["sqs_clock_patches", "sqs_patches"]


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
