"""One tick of the scaler: measure, decide, actuate, remember; the same on AWS and locally.

For fetch and then parse: read the scaler's memory of the function from the table, measure
(:mod:`stepcrawl.scaling.signals`), :func:`~stepcrawl.scaling.policy.decide`, and when the
decision changes the concurrency, set the event source mapping's ``MaximumConcurrency``
(``UpdateEventSourceMapping``; the local runtime re-reads it within seconds). The fetch
decision also sets the **feed window** (URLs allowed in the fetch queue at once), kept on the
scaler's fetch item, which feeders read: enough for two batches per concurrent invocation, and
never below the deployed ``window``, so the window follows the concurrency without a redeploy.

The memory is written after the mapping is set: a crash in between repeats the decision on
the next tick from the same memory, and setting the same concurrency twice is harmless.
Every decision is logged with its inputs and counted as metrics (names in
:mod:`stepcrawl.names`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.keys import scaler_key
from stepcrawl.names import METRIC_CONCURRENCY, METRIC_FEED_WINDOW, METRIC_SCALER_DECISIONS
from stepcrawl.scaling.policy import FETCH, PARSE, Decision, ScalerMemory, ScalerSettings, decide
from stepcrawl.scaling.signals import Platform, frontier_backlog, measure
from stepcrawl.storage import Table

__all__ = [
    "SCALER_FUNCTION",
    "WINDOW_BATCHES",
    "WINDOW_TTL",
    "Emit",
    "FeedWindow",
    "ScalerRun",
    "feed_window",
    "read_window",
    "run_scaler",
]

logger = logging.getLogger("stepcrawl.scaler")

#: The scaler function's name (``functions/scaler``), as the stack and local mode call it.
SCALER_FUNCTION: Final = "scaler"
#: Fetch batches the window holds per concurrent fetch invocation: one being taken, one ready.
WINDOW_BATCHES: Final = 2
#: Seconds a container keeps the feed window it read (the scaler changes it once a tick).
WINDOW_TTL: Final = 5.0
_DIRECTIONS: Final = {-1: "down", 0: "hold", 1: "up"}

#: emit(metric name, value, dimensions)
Emit = Callable[[str, float, Mapping[str, str]], None]


@dataclass(frozen=True)
class ScalerRun:
    """What one tick did: a decision per function, and the feed window it set."""

    decisions: list[Decision]
    window: int

    def as_dict(self) -> dict[str, Any]:
        return {"window": self.window, "decisions": [d.as_dict() for d in self.decisions]}


def feed_window(concurrency: int, batch_size: int, floor: int) -> int:
    return max(floor, concurrency * batch_size * WINDOW_BATCHES)


def read_window(table: Table) -> int | None:
    """The feed window the scaler set last, or ``None`` (no scaler has run)."""
    item = table.get(scaler_key(FETCH), consistent=False)
    if item is None or "window" not in item:
        return None
    return int(item["window"])


class FeedWindow:
    """The window a container's feeders use: the scaler's last one, re-read at most every
    :data:`WINDOW_TTL` seconds, or ``deployed`` while no scaler has run."""

    def __init__(self, table: Table, deployed: int, clock: Callable[[], float]) -> None:
        self.table, self.deployed, self.clock = table, deployed, clock
        self._value = deployed
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= WINDOW_TTL:
                self._read_at = now
                self._value = read_window(self.table) or self.deployed
            return self._value


def run_scaler(
    table: Table,
    platform: Platform,
    settings: ScalerSettings,
    *,
    now: float,
    deployed_window: int,
    fetch_batch_size: int,
    emit: Emit | None = None,
) -> ScalerRun:
    """Scale fetch and parse once; returns what was decided."""
    backlog = frontier_backlog(table)
    decisions: list[Decision] = []
    window = deployed_window
    for function in (FETCH, PARSE):
        key = scaler_key(function)
        memory = ScalerMemory.of(table.get(key, consistent=True))
        signals = measure(
            platform, function, memory, now=now, backlog=backlog, default_span=settings.tick
        )
        decision = decide(signals, memory, settings)
        if decision.concurrency != signals.concurrency:
            platform.set_concurrency(function, decision.concurrency)
        item: dict[str, Any] = {
            "pk": key[0],
            "sk": key[1],
            **decision.memory.to_item(),
            "concurrency": decision.concurrency,
            "reason": decision.reason,
            "at": now,
        }
        if function == FETCH:
            window = feed_window(decision.concurrency, fetch_batch_size, deployed_window)
            item["window"] = window
        table.put(item)
        logger.info("scaler decision", extra={"decision": decision.as_dict()})
        if emit is not None:
            dims = {"function": function}
            emit(METRIC_CONCURRENCY, decision.concurrency, dims)
            emit(METRIC_SCALER_DECISIONS, 1, {**dims, "direction": _DIRECTIONS[decision.direction]})
        decisions.append(decision)
    if emit is not None:
        emit(METRIC_FEED_WINDOW, window, {})
    return ScalerRun(decisions, window)
