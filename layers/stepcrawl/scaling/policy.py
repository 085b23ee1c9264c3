"""The scaler's policy: one pure decision per function per tick.

The scaler Lambda gathers :class:`Signals` (CloudWatch, SQS, DynamoDB), calls :func:`decide`
with what it kept from the last tick (:class:`ScalerMemory`) and writes the new
``MaximumConcurrency`` of the function's SQS event-source mapping. Nothing here does I/O, reads
a clock or draws a random number, so every rule is tested as a table and as properties, and the
same function drives the simulation (:mod:`stepcrawl.scaling.simulation`).

The rules, in the order they are tried (``docs/scaling.md`` has the numbers):

1. **bounds**: a mapping outside ``[min, max]`` is brought back at once.
2. **throttled / errors** (fetch only): the targets' 429/503 or 5xx/timeout ratio above
   ``throttle_high`` scales fetch down, whatever the queue says, and leaves a ceiling.
3. **idle**: no work anywhere and little traffic: straight down to the minimum.
4. **qps_high / level_high**: scale up toward the concurrency that serves the measured demand
   and brings the water level, one tick ahead, to the middle of the band.
5. **low_load**: little traffic *and* a low level: scale down toward the same estimate, sized
   on the highest demand of the last ``cooldown_down`` seconds.
6. otherwise **hold** (the band between the thresholds).

A change then passes through a bounded step (``max_step_up``, ``max_step_down``), the dead band,
the throttle ceiling, the bounds and the cooldowns, each of which may turn it into a hold with
its own reason. The thresholds, steps and cooldowns are :class:`ScalerSettings`
(:mod:`stepcrawl.scaling.settings`, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from stepcrawl.scaling.settings import ScalerSettings

__all__ = [
    "FETCH",
    "PARSE",
    "REASONS",
    "Decision",
    "ScalerMemory",
    "ScalerSettings",
    "Signals",
    "decide",
    "water_level",
]

FETCH: Final = "fetch"
PARSE: Final = "parse"

#: Below this many messages/s a slot's measured drain is a broken measurement (one message per
#: 1,000 s is beyond Lambda's 900 s timeout), not a reason to ask for a million slots.
MIN_DRAIN: Final = 1e-3

#: Every reason :func:`decide` may give (dashboards and alarms match on them).
REASONS: Final = frozenset(
    {
        "bounds",
        "throttled",
        "errors",
        "idle",
        "qps_high",
        "level_high",
        "low_load",
        "hold",
        "headroom",
        "dead_band",
        "cooldown",
        "throttle_rising",
        "ceiling",
        "at_max",
        "at_min",
    }
)


@dataclass(frozen=True)
class Signals:
    """What the scaler measured for one function over the last tick."""

    function: str
    now: float
    concurrency: int
    queue_depth: int
    in_flight: int
    oldest_age: float
    backlog: int
    qps: float
    drain_per_slot: float | None
    error_ratio: float
    throttle_ratio: float
    open_breakers: int

    def __post_init__(self) -> None:
        """Negative counts come from a broken collector; scaling on them would be a guess."""
        numbers = (
            self.concurrency,
            self.queue_depth,
            self.in_flight,
            self.oldest_age,
            self.backlog,
            self.qps,
            self.error_ratio,
            self.throttle_ratio,
            self.open_breakers,
        )
        if any(not math.isfinite(n) or n < 0 for n in numbers):
            raise ValueError(f"signals must be finite and non-negative: {self!r}")
        if self.drain_per_slot is not None and not math.isfinite(self.drain_per_slot):
            raise ValueError("drain_per_slot must be finite")

    @property
    def work(self) -> int:
        """Everything waiting for this function: visible, in flight and still in the frontier."""
        return self.queue_depth + self.in_flight + self.backlog


@dataclass(frozen=True)
class ScalerMemory:
    """What the scaler keeps between ticks (stored as :meth:`to_item`)."""

    last_change_at: float | None = None
    last_direction: int = 0
    last_throttle_ratio: float = 0.0
    #: After a throttled decrease: no increase above this until ``ceiling_until``.
    ceiling: int | None = None
    ceiling_until: float | None = None
    #: The work seen at the last tick and when: its change is the demand the queue absorbed.
    last_work: int | None = None
    last_at: float | None = None
    #: The highest demand estimate of the last ``cooldown_down`` seconds and when it was seen.
    peak_demand: float | None = None
    peak_at: float | None = None

    def to_item(self) -> dict[str, Any]:
        """Plain numbers, unset fields left out (DynamoDB has no use for nulls)."""
        item: dict[str, Any] = {
            "last_change_at": self.last_change_at,
            "last_direction": self.last_direction,
            "last_throttle_ratio": self.last_throttle_ratio,
            "ceiling": self.ceiling,
            "ceiling_until": self.ceiling_until,
            "last_work": self.last_work,
            "last_at": self.last_at,
            "peak_demand": self.peak_demand,
            "peak_at": self.peak_at,
        }
        return {key: value for key, value in item.items() if value is not None}

    @classmethod
    def of(cls, item: Mapping[str, Any] | None) -> ScalerMemory:
        """Read back an item; numbers may come as ``Decimal`` and unknown keys are ignored."""
        if not item:
            return cls()

        def number(key: str) -> float | None:
            value = item.get(key)
            return None if value is None else float(value)

        def integer(key: str) -> int | None:
            value = item.get(key)
            return None if value is None else int(value)

        return cls(
            last_change_at=number("last_change_at"),
            last_direction=integer("last_direction") or 0,
            last_throttle_ratio=number("last_throttle_ratio") or 0.0,
            ceiling=integer("ceiling"),
            ceiling_until=number("ceiling_until"),
            last_work=integer("last_work"),
            last_at=number("last_at"),
            peak_demand=number("peak_demand"),
            peak_at=number("peak_at"),
        )


@dataclass(frozen=True)
class Decision:
    """The new ``MaximumConcurrency`` (``== previous`` when held), why, and what to remember."""

    function: str
    previous: int
    concurrency: int
    direction: int
    reason: str
    level: float
    memory: ScalerMemory
    #: The concurrency the rule aimed at, before steps, dead band, ceiling and bounds.
    target: int | None = None
    #: Messages/s arriving, as estimated from the throughput and the change of the work.
    demand: float = 0.0
    drain_per_slot: float = 0.0
    signals: Signals | None = None

    def as_dict(self) -> dict[str, Any]:
        """One JSON log line: the decision and the inputs' key figures."""
        out: dict[str, Any] = {
            "function": self.function,
            "previous": self.previous,
            "concurrency": self.concurrency,
            "direction": self.direction,
            "reason": self.reason,
            "level": round(self.level, 4),
            "target": self.target,
            "demand": round(self.demand, 3),
            "drain_per_slot": self.drain_per_slot,
            "memory": self.memory.to_item(),
        }
        if self.signals is not None:
            s = self.signals
            out.update(
                queue_depth=s.queue_depth,
                in_flight=s.in_flight,
                backlog=s.backlog,
                oldest_age=s.oldest_age,
                qps=s.qps,
                error_ratio=s.error_ratio,
                throttle_ratio=s.throttle_ratio,
                open_breakers=s.open_breakers,
            )
        return out


def water_level(work: int, concurrency: int, drain_per_slot: float, tick: float) -> float:
    """Queued work over what the concurrency drains in one tick (1.0: exactly one tick's worth).

    A mapping at 0 is treated as 1 so that a stopped function with work reads as a high level
    rather than a division by zero.
    """
    return work / (max(concurrency, 1) * drain_per_slot * tick)


@dataclass(frozen=True)
class _Intent:
    """What a rule wants before the shaping (steps, dead band, ceiling, bounds, cooldown)."""

    reason: str
    target: int
    cooldown: float
    #: Load rules are shaped by the step bounds and the dead band; the safety rules are not
    #: held back by the dead band (a small throttled decrease still matters to the target).
    load: bool = True
    #: Idle goes straight to the minimum: there is nothing to drain, so no step to bound.
    stepped: bool = True


def decide(signals: Signals, memory: ScalerMemory, settings: ScalerSettings) -> Decision:
    """The next ``MaximumConcurrency`` of one function, and what to remember for the next tick.

    Deterministic: the same three inputs always give the same decision.
    """
    s, cfg = signals, settings
    measured = s.drain_per_slot
    usable = measured is not None and measured >= MIN_DRAIN
    drain = measured if measured is not None and usable else cfg.default_drain_per_slot
    level = water_level(s.work, s.concurrency, drain, cfg.tick)
    demand = _demand(s, memory, cfg)
    ceiling = _ceiling(memory, s.now)
    peak, peak_at = _peak(memory, s.now, demand, cfg)
    intent = _intent(s, cfg, level, demand, peak, drain)
    new, reason = _shape(s, memory, cfg, intent, ceiling)
    direction = (new > s.concurrency) - (new < s.concurrency)
    if intent.reason in {"throttled", "errors"}:
        # Remember where the target pushed back: without it the backlog would raise fetch
        # straight back into the 429s on the next tick, a saw-tooth on the target's limit.
        ceiling = new if ceiling is None else min(ceiling, new)
        ceiling_until: float | None = s.now + cfg.throttle_hold
    else:
        ceiling_until = memory.ceiling_until if ceiling is not None else None
    changed = direction != 0
    remembered = ScalerMemory(
        last_change_at=s.now if changed else memory.last_change_at,
        last_direction=direction if changed else memory.last_direction,
        last_throttle_ratio=s.throttle_ratio,
        ceiling=ceiling,
        ceiling_until=ceiling_until,
        last_work=s.work,
        last_at=s.now,
        peak_demand=peak,
        peak_at=peak_at,
    )
    return Decision(
        function=s.function,
        previous=s.concurrency,
        concurrency=new,
        direction=direction,
        reason=reason,
        level=level,
        memory=remembered,
        target=intent.target,
        demand=demand,
        drain_per_slot=drain,
        signals=s,
    )


def _demand(s: Signals, memory: ScalerMemory, cfg: ScalerSettings) -> float:
    """Messages/s arriving: what was processed plus what the work grew by (or minus it shrank).

    Throughput alone is biased both ways: it is capped by the concurrency while a backlog grows
    (so it under-reads demand), and it is inflated while a backlog drains (sizing on it then
    overshoots). Work conservation corrects both. A stale or missing previous sample (a skipped
    tick, a first run) falls back to the throughput.
    """
    if memory.last_work is None or memory.last_at is None:
        return s.qps
    elapsed = s.now - memory.last_at
    if not 0 < elapsed <= 3 * cfg.tick:
        return s.qps
    return max(0.0, s.qps + (s.work - memory.last_work) / elapsed)


def _peak(
    memory: ScalerMemory, now: float, demand: float, cfg: ScalerSettings
) -> tuple[float, float]:
    """The highest demand of the last ``cooldown_down`` seconds (a stabilization window).

    Scaling down on one quiet tick is how noise becomes oscillation: the next ordinary tick
    builds a queue and scales back up. Kubernetes' HPA sizes its scale-downs on the highest
    recommendation of a window for the same reason. Approximate: when the peak ages out, the
    current demand replaces it (one number kept instead of a window of samples).
    """
    if memory.peak_demand is None or memory.peak_at is None:
        return demand, now
    if demand >= memory.peak_demand or now - memory.peak_at > cfg.cooldown_down:
        return demand, now
    return memory.peak_demand, memory.peak_at


def _ceiling(memory: ScalerMemory, now: float) -> int | None:
    """The throttle ceiling while it holds; after ``throttle_hold`` fetch may probe above it."""
    if memory.ceiling is None or memory.ceiling_until is None or now >= memory.ceiling_until:
        return None
    return memory.ceiling


def _needed(s: Signals, cfg: ScalerSettings, demand: float, drain: float) -> int:
    """The concurrency that serves the demand with headroom and puts the level at its target.

    The level term is the concurrency ``c`` at which the level *after* one more tick would be
    the target ``L``: ``(work + demand*tick - c*drain*tick) = L * c*drain*tick``. Sizing on the
    level *now* (``work / (L*drain*tick)``, what KEDA does with queue length) asks for the whole
    backlog to be gone in ``L`` ticks while ignoring what the current slots drain meanwhile; it
    overshoots by the backlog, and the cap stays there as long as traffic holds. The demand term
    cannot see a backlog at all. Both must hold.
    """
    span = drain * cfg.tick
    by_level = (s.work + demand * cfg.tick) / ((1 + cfg.target_level) * span)
    by_demand = demand / (cfg.utilization_target * drain)
    # Capped before rounding: the bounds clamp it anyway, and a float may not fit an int.
    return math.ceil(min(max(by_level, by_demand), cfg.max_concurrency))


def _intent(
    s: Signals, cfg: ScalerSettings, level: float, demand: float, peak: float, drain: float
) -> _Intent:
    """Which rule applies, and the concurrency it aims at."""
    c = s.concurrency
    if not cfg.min_concurrency <= c <= cfg.max_concurrency:
        # A mapping set by hand or before the settings changed: bounds are a hard contract.
        return _Intent("bounds", min(max(c, cfg.min_concurrency), cfg.max_concurrency), 0.0)
    pressure = max(s.throttle_ratio, s.error_ratio)
    if s.function == FETCH and pressure > cfg.throttle_high:
        # The targets, not the queue, set fetch's limit: a 429 ratio r at concurrency c means
        # they accepted about c * (1 - r); stay a margin below that whatever the backlog says.
        # Parse talks to no target, so its errors are bugs that more or fewer slots won't fix.
        reason = "throttled" if s.throttle_ratio >= s.error_ratio else "errors"
        target = math.floor(c * (1 - min(pressure, 1.0)) * cfg.throttle_backoff)
        return _Intent(reason, target, cfg.cooldown_throttled, load=False)
    needed = _needed(s, cfg, demand, drain)
    if s.work == 0 and s.qps < cfg.qps_low and needed <= cfg.min_concurrency:
        # Nothing to drain and a trickle the floor can carry: no reason to step down gently,
        # return to the floor so that the next burst starts gently on the targets instead.
        return _Intent("idle", cfg.min_concurrency, cfg.cooldown_down, load=False, stepped=False)
    if level > cfg.level_high or s.qps > cfg.qps_high:
        reason = "level_high" if level > cfg.level_high else "qps_high"
        return _Intent(reason, needed, cfg.cooldown_up)
    if s.qps < cfg.qps_low and level < cfg.level_low:
        floor = max(_needed(s, cfg, peak, drain), cfg.min_concurrency)
        return _Intent("low_load", floor, cfg.cooldown_down)
    # Between the thresholds: the hysteresis band of the original design.
    return _Intent("hold", c, 0.0)


def _shape(
    s: Signals, memory: ScalerMemory, cfg: ScalerSettings, intent: _Intent, ceiling: int | None
) -> tuple[int, str]:
    """Turn an intent into the new concurrency and the reason it was (not) reached."""
    c = s.concurrency
    if intent.reason in {"bounds", "hold"}:
        return intent.target, intent.reason
    if intent.reason in {"level_high", "qps_high"}:
        # An up trigger never scales down: only the down rule (low traffic *and* low level)
        # does, so that the thresholds keep their hysteresis.
        if intent.target <= c:
            return c, "at_max" if intent.target == c == cfg.max_concurrency else "headroom"
        return _shape_up(s, memory, cfg, intent, ceiling)
    if intent.target < c:
        return _shape_down(s, memory, cfg, intent)
    return c, "at_min" if intent.reason != "hold" and c == cfg.min_concurrency else "hold"


def _shape_up(
    s: Signals, memory: ScalerMemory, cfg: ScalerSettings, intent: _Intent, ceiling: int | None
) -> tuple[int, str]:
    """An increase, at most ``max_step_up`` times the current, under the ceiling and max.

    The bounded step is what keeps a transient reading (a burst, a half-written metric) from
    multiplying the load on the targets in one tick: a real need is still there next tick.
    """
    c = s.concurrency
    new = min(intent.target, math.ceil(c * cfg.max_step_up), cfg.max_concurrency)
    if s.function == FETCH and ceiling is not None and new > ceiling:
        new = ceiling
        if new <= c:
            return c, "ceiling"
    if new <= c:
        return c, "at_max"
    if new - c <= cfg.dead_band * c:
        return c, "dead_band"
    if s.function == FETCH and s.throttle_ratio > memory.last_throttle_ratio:
        # A rising 429 ratio is the target's first word; adding slots now would talk over it.
        return c, "throttle_rising"
    if _cooling(s, memory, intent.cooldown, cfg):
        return c, "cooldown"
    return new, intent.reason


def _shape_down(
    s: Signals, memory: ScalerMemory, cfg: ScalerSettings, intent: _Intent
) -> tuple[int, str]:
    """A decrease, keeping at least ``max_step_down`` of the current (idle excepted)."""
    c = s.concurrency
    new = intent.target
    if intent.stepped:
        new = max(new, min(c - 1, math.ceil(c * cfg.max_step_down)))
    new = max(new, cfg.min_concurrency)
    if new >= c:
        return c, "at_min"
    if intent.load and c - new <= cfg.dead_band * c:
        return c, "dead_band"
    if _cooling(s, memory, intent.cooldown, cfg):
        return c, "cooldown"
    return new, intent.reason


def _cooling(s: Signals, memory: ScalerMemory, cooldown: float, cfg: ScalerSettings) -> bool:
    """Whether the last change is too recent for its effect to show in the signals yet.

    Deciding again before the previous change shows up in a full tick of metrics is how
    controllers oscillate. The slack forgives a schedule that fires a few seconds early.
    """
    if memory.last_change_at is None:
        return False
    return s.now - memory.last_change_at + cfg.clock_slack < cooldown
