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

The fetch tick also decides the **telemetry level** (:mod:`stepcrawl.telemetry.shedding`) from
fetch's error and throttle ratios, keeps it on the same item (the functions read it through
:class:`~stepcrawl.telemetry.levels.TelemetryCache` and set their log levels,
:func:`stepcrawl.runtime.apply_telemetry`),
and when it changes sets the stage's X-Ray sampling rule to the level's rate (a
:class:`SamplingRule`), before the item is written, for the same reason as the mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol

from stepcrawl.crawl.window import frontier_backlog
from stepcrawl.names import (
    METRIC_CONCURRENCY,
    METRIC_FEED_WINDOW,
    METRIC_SCALER_DECISIONS,
    METRIC_TELEMETRY_SHED,
)
from stepcrawl.scaling.policy import (
    FETCH,
    PARSE,
    Decision,
    ScalerMemory,
    ScalerSettings,
    Signals,
    decide,
)
from stepcrawl.scaling.signals import Platform, measure
from stepcrawl.storage import Table
from stepcrawl.table_keys import scaler_key
from stepcrawl.telemetry.shedding import (
    SheddingDecision,
    SheddingSettings,
    SheddingState,
    TelemetryLevel,
    decide_level,
    pressure,
)

__all__ = [
    "SCALER_FUNCTION",
    "WINDOW_BATCHES",
    "Emit",
    "SamplingOutcome",
    "SamplingRule",
    "ScalerRun",
    "feed_window",
    "run_scaler",
]

logger = logging.getLogger("stepcrawl.scaler")

#: The scaler function's name (``functions/scaler``), as the stack and local mode call it.
SCALER_FUNCTION: Final = "scaler"
#: Fetch batches the window holds per concurrent fetch invocation: one being taken, one ready.
WINDOW_BATCHES: Final = 2
_DIRECTIONS: Final = {-1: "down", 0: "hold", 1: "up"}

#: emit(metric name, value, dimensions)
Emit = Callable[[str, float, Mapping[str, str]], None]

#: ``set``: the rule has the rate now; ``skipped``: there is nothing to set (no rule, or an
#: endpoint without sampling rules, such as the local emulator), not worth retrying;
#: ``failed``: retry on the next tick.
SamplingOutcome = Literal["set", "skipped", "failed"]


class SamplingRule(Protocol):
    """The stage's X-Ray sampling rule (:class:`stepcrawl.scaling.aws.XRaySampling`)."""

    def set_rate(self, rate: float) -> SamplingOutcome:
        """Set the rule's ``FixedRate``; never raises (the tick's scaling matters more)."""
        ...


@dataclass(frozen=True)
class ScalerRun:
    """What one tick did: a decision per function, and the feed window it set."""

    decisions: list[Decision]
    window: int
    #: The telemetry level decided this tick (None: shedding not configured).
    telemetry: SheddingDecision | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "window": self.window,
            "decisions": [d.as_dict() for d in self.decisions],
        }
        if self.telemetry is not None:
            out["telemetry"] = self.telemetry.as_dict()
        return out


def feed_window(concurrency: int, batch_size: int, floor: int) -> int:
    return max(floor, concurrency * batch_size * WINDOW_BATCHES)


def _shed(
    stored: Mapping[str, Any] | None,
    signals: Signals,
    memory: ScalerMemory,
    settings: ScalerSettings,
    shedding: SheddingSettings,
    sampling: SamplingRule | None,
) -> SheddingDecision:
    """The telemetry level after this tick, with the sampling rule set to match."""
    state = SheddingState.of(stored)
    span = signals.now - memory.last_at if memory.last_at is not None else settings.tick
    decision = decide_level(
        pressure(signals.error_ratio, signals.throttle_ratio),
        state,
        shedding,
        now=signals.now,
        span=span,
        slack=settings.clock_slack,
    )
    if decision.changed:
        # Visible at the shed level too: the one line that says why the logs went quiet.
        log = logger.warning if decision.level is TelemetryLevel.SHED else logger.info
        log("telemetry level changed", extra={"telemetry": decision.as_dict()})
    rate = shedding.rate(decision.level)
    kept = decision.state
    if sampling is not None and kept.sampling_rate != rate:
        # Kept unless it failed: a failure is retried next tick, a skip (no rule here) is not.
        outcome = sampling.set_rate(rate)
        if outcome != "failed":
            kept = replace(kept, sampling_rate=rate)
    return replace(decision, state=kept)


def run_scaler(
    table: Table,
    platform: Platform,
    settings: ScalerSettings,
    *,
    now: float,
    deployed_window: int,
    fetch_batch_size: int,
    emit: Emit | None = None,
    shedding: SheddingSettings | None = None,
    sampling: SamplingRule | None = None,
) -> ScalerRun:
    """Scale fetch and parse once; returns what was decided. With ``shedding``, also
    decide the telemetry level (and set ``sampling``'s rate when it changes)."""
    backlog = frontier_backlog(table)
    decisions: list[Decision] = []
    window = deployed_window
    telemetry: SheddingDecision | None = None
    for function in (FETCH, PARSE):
        key = scaler_key(function)
        stored = table.get(key, consistent=True)
        memory = ScalerMemory.of(stored)
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
            if shedding is not None:
                telemetry = _shed(stored, signals, memory, settings, shedding, sampling)
                item.update(telemetry.state.to_item())
        table.put(item)
        logger.info("scaler decision", extra={"decision": decision.as_dict()})
        if emit is not None:
            dims = {"function": function}
            emit(METRIC_CONCURRENCY, decision.concurrency, dims)
            emit(METRIC_SCALER_DECISIONS, 1, {**dims, "direction": _DIRECTIONS[decision.direction]})
        decisions.append(decision)
    if emit is not None:
        emit(METRIC_FEED_WINDOW, window, {})
        if telemetry is not None:
            emit(METRIC_TELEMETRY_SHED, int(telemetry.level is TelemetryLevel.SHED), {})
    return ScalerRun(decisions, window, telemetry)
