"""What the scaler measures each tick, from counters only (never a scan).

Per function (fetch, parse):

- the queue's visible and in-flight messages (SQS's approximate counts; delayed messages are
  politeness-spaced fetches that more concurrency could not take sooner, so they are left out)
  and the age of its oldest message (CloudWatch ``AWS/SQS``; the emulator publishes none, so
  locally it reads 0);
- for fetch, the frontier's backlog: the running crawl tasks' admitted URLs not recorded yet
  (``claimed - finished`` on their task records, listed by the ``RUNNING`` partition), less
  what already sits in the fetch and parse queues;
- what the functions counted over the tick (the EMF metrics they print, which CloudWatch
  turns into metric data, locally :class:`~stepcrawl.emulator.metrics.EmfForwarder`): fetches and
  their 429/503 and transient failures (the targets' health), pages recorded, parse bundles,
  breaker transitions;
- the mapping's current ``MaximumConcurrency``.

A function's drain per slot (messages one concurrent invocation takes per second) is measured
only while its queue had work at both ends of the tick: an idle function's rate says nothing
about what it could do, and the policy then falls back on its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from stepcrawl.names import (
    METRIC_BREAKER_TRANSITIONS,
    METRIC_BUNDLES,
    METRIC_FETCH_ERRORS,
    METRIC_FETCH_THROTTLED,
    METRIC_PAGES_FETCHED,
    METRIC_PAGES_RECORDED,
)
from stepcrawl.scaling.policy import FETCH, PARSE, ScalerMemory, Signals

__all__ = ["Platform", "QueueStats", "measure"]


@dataclass(frozen=True)
class QueueStats:
    visible: int
    in_flight: int
    delayed: int
    oldest_age: float  # seconds; 0 when unknown


class Platform(Protocol):
    """The AWS services the scaler reads and sets (:mod:`stepcrawl.scaling.aws` on boto3)."""

    def queue(self, function: str) -> QueueStats:
        """The counts of the queue that feeds ``function``."""
        ...

    def metric_sum(self, name: str, service: str, start: float, end: float) -> float:
        """The sum of stepcrawl's metric ``name`` printed by ``service`` in [start, end)."""
        ...

    def concurrency(self, function: str) -> int:
        """The ``MaximumConcurrency`` of ``function``'s event source mapping now."""
        ...

    def set_concurrency(self, function: str, value: int) -> None: ...


def measure(
    platform: Platform,
    function: str,
    memory: ScalerMemory,
    *,
    now: float,
    backlog: int,
    default_span: float,
) -> Signals:
    """The signals of ``function`` over the span since the last tick (``default_span`` the
    first time): ``backlog`` is :func:`stepcrawl.crawl.window.frontier_backlog`, read once
    for both functions."""
    span = now - memory.last_at if memory.last_at is not None else default_span
    span = max(1.0, span)
    start = now - span
    stats = platform.queue(function)
    concurrency = platform.concurrency(function)
    if function == FETCH:
        done = pages = platform.metric_sum(METRIC_PAGES_FETCHED, FETCH, start, now)
        throttled = platform.metric_sum(METRIC_FETCH_THROTTLED, FETCH, start, now)
        errors = platform.metric_sum(METRIC_FETCH_ERRORS, FETCH, start, now)
        transitions = platform.metric_sum(METRIC_BREAKER_TRANSITIONS, FETCH, start, now)
        queued = stats.visible + stats.in_flight + stats.delayed
        waiting = max(0, backlog - queued)
    elif function == PARSE:
        done = platform.metric_sum(METRIC_BUNDLES, PARSE, start, now)
        pages = platform.metric_sum(METRIC_PAGES_RECORDED, PARSE, start, now)
        throttled = errors = transitions = 0.0
        waiting = 0
    else:
        raise ValueError(f"the scaler sets fetch and parse, not {function!r}")
    rate = done / span  # messages drained per second
    busy = stats.visible > 0 and (memory.last_work or 0) > 0
    return Signals(
        function=function,
        now=now,
        concurrency=concurrency,
        queue_depth=stats.visible,
        in_flight=stats.in_flight,
        oldest_age=stats.oldest_age,
        backlog=waiting,
        qps=pages / span,
        drain_per_slot=rate / max(1, concurrency) if busy and rate > 0 else None,
        error_ratio=min(1.0, errors / done) if done else 0.0,
        throttle_ratio=min(1.0, throttled / done) if done else 0.0,
        open_breakers=int(transitions),
    )
