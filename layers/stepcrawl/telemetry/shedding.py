"""Shedding telemetry under load: one pure decision per scaler tick.

When fetch's targets fail or push back, every failed fetch logs and, when its run is traced,
records a trace: the telemetry bill grows with the trouble, while a handful of traces and the
warnings already say what is wrong. So when the share of fetches that failed transiently or
were throttled (the tick's ``error_ratio + throttle_ratio``, what the scaler measures) stays
above ``shed_above`` for ``shed_after`` seconds, the level steps down to **shed**: the
functions log at WARNING and above only, and the stage's X-Ray sampling rule drops from
``trace_rate`` to ``shed_rate``. It steps back to **full** (the configured log level and
rate) once the ratio has stayed at or below ``recover_below`` for ``recover_after`` seconds.

The two thresholds and the two hold times are the hysteresis: a single bad tick (with a hold
time longer than a tick) does not shed, a single good one does not restore, and a ratio
between the thresholds keeps whatever level holds, so the level cannot flap inside the band.

A condition "holds since" the start of the tick's measurement window in which it was first
seen: the ratio of a tick covers the whole span since the previous tick, so on AWS (a tick a
minute) one high tick is a minute of high ratio, which meets the default 30 s; two low ticks
meet the default 120 s. Nothing here does I/O or reads a clock; the scaler
(:mod:`stepcrawl.scaling.scaler`) keeps :class:`SheddingState` on its fetch item and actuates;
the functions follow it (:mod:`stepcrawl.telemetry.levels`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "SHEDDING_KEY",
    "SheddingDecision",
    "SheddingSettings",
    "SheddingState",
    "TelemetryLevel",
    "decide_level",
    "pressure",
]

#: The key of :class:`SheddingSettings` in the scaler's settings JSON (``STEPCRAWL_SCALER``).
SHEDDING_KEY: Final = "shedding"


class TelemetryLevel(StrEnum):
    """``full``: the configured log level and trace rate; ``shed``: WARNING+, reduced rate."""

    FULL = "full"
    SHED = "shed"


class SheddingSettings(BaseModel):
    """The thresholds of shedding; the defaults are the original design's figures."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    enabled: bool = Field(True, description="False: the level stays full whatever the ratios.")
    shed_above: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Shed when fetch's error + throttle ratio stays above this.",
    )
    shed_after: float = Field(
        30.0, ge=0, le=86400, description="Seconds the ratio must stay above shed_above."
    )
    recover_below: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Restore full telemetry when the ratio stays at or below this.",
    )
    recover_after: float = Field(
        120.0, ge=0, le=86400, description="Seconds the ratio must stay at or below recover_below."
    )
    trace_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="The sampling rule's FixedRate at full (the stack's configured rate).",
    )
    shed_rate: float = Field(
        0.005, ge=0, le=1, description="The sampling rule's FixedRate while shed."
    )

    @model_validator(mode="after")
    def _ordered(self) -> SheddingSettings:
        """Crossed thresholds would let one ratio both shed and recover: a flap every tick."""
        if self.recover_below > self.shed_above:
            raise ValueError("recover_below must not exceed shed_above")
        if self.shed_rate > self.trace_rate:
            raise ValueError("shed_rate must not exceed trace_rate")
        return self

    def rate(self, level: TelemetryLevel) -> float:
        """The sampling rule's FixedRate at ``level``."""
        return self.shed_rate if level is TelemetryLevel.SHED else self.trace_rate

    def scaled(self, factor: float) -> SheddingSettings:
        """The same policy on a clock ``factor`` times as fast (local mode's short ticks)."""
        return self.model_copy(
            update={
                "shed_after": self.shed_after * factor,
                "recover_after": self.recover_after * factor,
            }
        )


@dataclass(frozen=True)
class SheddingState:
    """What the scaler keeps between ticks (on its fetch item, keys ``telemetry*``)."""

    level: TelemetryLevel = TelemetryLevel.FULL
    #: Since when the condition that would change the level has held (None: it does not).
    pending_since: float | None = None
    #: When the level last changed.
    changed_at: float | None = None
    #: The FixedRate last set on the sampling rule (None: never set, or could not be).
    sampling_rate: float | None = None

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "telemetry": self.level.value,
            "telemetry_pending_since": self.pending_since,
            "telemetry_changed_at": self.changed_at,
            "telemetry_sampling_rate": self.sampling_rate,
        }
        return {key: value for key, value in item.items() if value is not None}

    @classmethod
    def of(cls, item: Mapping[str, Any] | None) -> SheddingState:
        """Read back an item (numbers may be ``Decimal``); an unknown level reads as full."""
        if not item:
            return cls()

        def number(key: str) -> float | None:
            value = item.get(key)
            return None if value is None else float(value)

        raw = str(item.get("telemetry", TelemetryLevel.FULL.value))
        level = TelemetryLevel(raw) if raw in set(TelemetryLevel) else TelemetryLevel.FULL
        return cls(
            level=level,
            pending_since=number("telemetry_pending_since"),
            changed_at=number("telemetry_changed_at"),
            sampling_rate=number("telemetry_sampling_rate"),
        )


@dataclass(frozen=True)
class SheddingDecision:
    """The level after this tick, whether it changed, why, and the state to keep."""

    level: TelemetryLevel
    changed: bool
    reason: str
    ratio: float
    state: SheddingState

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level.value,
            "changed": self.changed,
            "reason": self.reason,
            "ratio": round(self.ratio, 4),
            "pending_since": self.state.pending_since,
        }


def pressure(error_ratio: float, throttle_ratio: float) -> float:
    """The share of fetches that failed transiently or were pushed back (disjoint counts)."""
    return min(1.0, error_ratio + throttle_ratio)


def decide_level(
    ratio: float,
    state: SheddingState,
    settings: SheddingSettings,
    *,
    now: float,
    span: float,
    slack: float = 0.0,
) -> SheddingDecision:
    """The telemetry level after a tick whose ratio (see :func:`pressure`) covers the
    ``span`` seconds up to ``now``. ``slack`` forgives a schedule that fires a little early
    (the scaler's ``clock_slack``), so that two ticks a minute apart meet 120 s.

    Reasons: ``disabled``, ``full`` / ``shed`` (nothing pending), ``shed_pending`` /
    ``recover_pending`` (the condition holds, not for long enough yet), ``shed_now`` /
    ``recover_now`` (the level changes).
    """
    if not math.isfinite(ratio) or not 0 <= ratio <= 1:
        raise ValueError(f"ratio must be within [0, 1], not {ratio!r}")
    start = now - max(0.0, span)
    if not settings.enabled:
        return _keep(state, TelemetryLevel.FULL, "disabled", ratio, now)
    if state.level is TelemetryLevel.FULL:
        triggered, hold, goal = ratio > settings.shed_above, settings.shed_after, "shed"
        target = TelemetryLevel.SHED
    else:
        triggered, hold, goal = ratio <= settings.recover_below, settings.recover_after, "recover"
        target = TelemetryLevel.FULL
    if not triggered:
        # Inside the band (or on the level's own side): the pending condition is broken.
        return SheddingDecision(
            state.level, False, state.level.value, ratio, replace(state, pending_since=None)
        )
    since = state.pending_since if state.pending_since is not None else start
    if now - since + slack >= hold:
        return _keep(state, target, f"{goal}_now", ratio, now)
    return SheddingDecision(
        state.level, False, f"{goal}_pending", ratio, replace(state, pending_since=since)
    )


def _keep(
    state: SheddingState, level: TelemetryLevel, reason: str, ratio: float, now: float
) -> SheddingDecision:
    """``level`` from now on, nothing pending; a change is stamped with ``now``."""
    changed = level is not state.level
    kept = replace(
        state,
        level=level,
        pending_since=None,
        changed_at=now if changed else state.changed_at,
    )
    return SheddingDecision(level, changed, reason, ratio, kept)
