"""The scaler's settings: every knob of the policy, with its bounds and what it means.

:class:`ScalerSettings` is validated where it is read (the stack's ``scaler`` context, the
scaler Lambda's ``STEPCRAWL_SCALER`` environment, the simulation): every field has bounds, so a
typo is refused rather than turned into decisions, and a ``description`` saying what it means.
:func:`~stepcrawl.scaling.policy.decide` uses them; ``docs/scaling.md`` has the numbers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ScalerSettings"]


class ScalerSettings(BaseModel):
    """The knobs of the policy; the defaults are the original design's thresholds."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    qps_high: float = Field(
        500.0, ge=0, le=1e7, description="Scale up when pages/s over the last tick exceed this."
    )
    qps_low: float = Field(
        100.0, ge=0, le=1e7, description="Scale down only when pages/s are below this."
    )
    level_high: float = Field(
        0.8, gt=0, le=100, description="Scale up when the water level exceeds this."
    )
    level_low: float = Field(
        0.3, ge=0, le=100, description="Scale down only when the water level is below this."
    )
    level_target: float | None = Field(
        None,
        gt=0,
        le=100,
        description="Level a change aims at; inside (level_low, level_high). None: the middle.",
    )
    min_concurrency: int = Field(
        2, ge=2, le=1000, description="Lowest MaximumConcurrency (SQS mappings accept 2..1000)."
    )
    max_concurrency: int = Field(
        1000, ge=2, le=1000, description="Highest MaximumConcurrency (SQS mappings: 1000)."
    )
    cooldown_up: float = Field(
        60.0, ge=0, le=86400, description="Seconds after a change before another increase."
    )
    cooldown_down: float = Field(
        180.0, ge=0, le=86400, description="Seconds after a change before a load decrease."
    )
    cooldown_throttled: float = Field(
        60.0, ge=0, le=86400, description="Seconds after a change before a throttled decrease."
    )
    throttle_high: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Throttle (429/503) or error ratio of fetches above which fetch scales down.",
    )
    throttle_backoff: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Share of the concurrency the target still accepted that fetch keeps.",
    )
    throttle_hold: float = Field(
        1800.0,
        ge=0,
        le=86400,
        description="Seconds a throttled decrease caps later increases (the ceiling).",
    )
    tick: float = Field(
        60.0, ge=1, le=3600, description="Seconds between decisions (the schedule's period)."
    )
    max_step_up: float = Field(
        2.0, ge=1, le=10, description="Largest increase per tick, as a factor of the current."
    )
    max_step_down: float = Field(
        0.5, ge=0.05, le=1, description="Largest decrease per tick: keep at least this share."
    )
    dead_band: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Load changes smaller than this share of the current concurrency are held.",
    )
    utilization_target: float = Field(
        0.8, gt=0, le=1, description="Share of the slots' drain the measured demand should use."
    )
    default_drain_per_slot: float = Field(
        10.0,
        gt=0,
        le=1e6,
        description="Messages/s one concurrent invocation drains, when not measured.",
    )
    clock_slack: float = Field(
        5.0, ge=0, le=3600, description="Seconds of schedule jitter forgiven by the cooldowns."
    )

    @model_validator(mode="after")
    def _ordered(self) -> ScalerSettings:
        """Crossed thresholds would let one tick satisfy both rules and flap every tick."""
        if self.qps_low > self.qps_high:
            raise ValueError("qps_low must not exceed qps_high")
        if self.level_low >= self.level_high:
            raise ValueError("level_low must be below level_high")
        if self.min_concurrency > self.max_concurrency:
            raise ValueError("min_concurrency must not exceed max_concurrency")
        if not self.level_low < self.target_level < self.level_high:
            raise ValueError("level_target must lie strictly between level_low and level_high")
        return self

    @property
    def target_level(self) -> float:
        """The middle of the band by default: the farthest point from both triggers."""
        if self.level_target is not None:
            return self.level_target
        return (self.level_low + self.level_high) / 2
