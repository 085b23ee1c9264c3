"""A discrete-time model of one SQS-fed function under :func:`~stepcrawl.scaling.decide`.

Why a model and not the local cloud: convergence takes tens of one-minute ticks, and the
questions (does it reach the needed concurrency, does it oscillate, does it back off a target
that answers 429) are about the policy's dynamics, not about Lambda. The model keeps what the
policy sees and nothing more:

- work arrives at ``arrivals(tick)`` messages/s (optionally with seeded noise);
- each of the ``concurrency`` slots drains ``service_rate`` messages/s, so a tick attempts
  ``min(work, concurrency * service_rate * tick)`` messages (the cap is a ceiling, not a
  reservation: Lambda runs only as many slots as there is work for);
- a target with ``target_capacity`` requests/s answers 429 to the excess share of the attempts
  (the throttle ratio grows with the excess) and those messages go back to the queue;
- at the start of every tick the scaler sees the previous tick's throughput and throttle ratio
  and the work outstanding, decides, and the new concurrency holds for the tick.

Pure Python, deterministic for a given scenario (the noise uses its own seeded generator).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from stepcrawl.scaling.policy import FETCH, ScalerMemory, ScalerSettings, Signals, decide

__all__ = [
    "SCENARIOS",
    "Scenario",
    "TickRecord",
    "Trace",
    "needed_concurrency",
    "ramp",
    "simulate",
    "spike",
    "step",
    "throttling_target",
]

#: Epoch of the first tick (any value works; a round one keeps traces readable).
START: Final = 1_700_000_000.0
#: Fourteen days: SQS's longest retention, the cap of the oldest message's age.
MAX_AGE: Final = 14 * 86400.0


@dataclass(frozen=True)
class Scenario:
    """One mapping's workload, target and starting point."""

    name: str
    description: str
    ticks: int
    #: Messages/s arriving during a tick, by tick index.
    arrivals: Callable[[int], float]
    #: Messages/s one concurrent invocation drains.
    service_rate: float = 10.0
    start_concurrency: int = 2
    initial_work: float = 0.0
    #: Requests/s the target serves before it answers 429 (None: it never throttles).
    target_capacity: float | None = None
    #: First tick at which the target enforces its capacity.
    throttle_from: int = 0
    function: str = FETCH
    #: Messages one busy slot holds (the SQS batch): how the work splits into in-flight/visible.
    batch: int = 10
    #: Relative amplitude of uniform noise on the arrivals (0: none).
    noise: float = 0.0
    seed: int = 0
    #: Tick from which demand is at its final value: convergence is counted from here.
    settled_from: int = 0
    settings: ScalerSettings = field(default_factory=ScalerSettings)

    def needed(self, tick: int) -> int:
        """The concurrency that drains tick ``tick``'s arrivals (and that the target accepts)."""
        rate = self.arrivals(tick)
        if self.target_capacity is not None and tick >= self.throttle_from:
            rate = min(rate, self.target_capacity)
        return needed_concurrency(rate, self.service_rate, self.settings)


@dataclass(frozen=True)
class TickRecord:
    """One tick of a trace; ``concurrency`` is the one in force during the tick."""

    tick: int
    time: float
    arrival_rate: float
    work: float
    concurrency: int
    busy: float
    qps: float
    level: float
    throttle_ratio: float
    reason: str
    direction: int
    needed: int


@dataclass(frozen=True)
class Trace:
    """The ticks of one run and the measures the tests and the bench report."""

    scenario: Scenario
    ticks: tuple[TickRecord, ...]

    @property
    def concurrency(self) -> list[int]:
        return [t.concurrency for t in self.ticks]

    def reversals(self, start: int = 0) -> int:
        """Changes of direction among the changes from ``start`` on: oscillation counts them."""
        moves = [t.direction for t in self.ticks[start:] if t.direction != 0]
        return sum(1 for a, b in itertools.pairwise(moves) if a != b)

    def ticks_to_reach(self, needed: int, start: int = 0) -> int | None:
        """Ticks from ``start`` until the concurrency in force is at least ``needed``."""
        for t in self.ticks[start:]:
            if t.concurrency >= needed:
                return t.tick - start
        return None

    def ticks_to_drain(self, start: int = 0, below: float = 0.0) -> int | None:
        """Ticks from ``start`` until the outstanding work is at most ``below`` again.

        The tick ``start`` itself is skipped: a change of traffic begins with an empty queue.
        """
        for t in self.ticks[start + 1 :]:
            if t.work <= below:
                return t.tick - start
        return None

    def peak(self, start: int = 0, end: int | None = None) -> int:
        """The highest concurrency in force over ``[start, end)``."""
        return max(t.concurrency for t in self.ticks[start:end])


def needed_concurrency(rate: float, service_rate: float, settings: ScalerSettings) -> int:
    """The fewest slots whose drain covers ``rate`` (the queue then stays empty), in bounds."""
    slots = math.ceil(rate / service_rate - 1e-9)
    return min(max(slots, settings.min_concurrency), settings.max_concurrency)


def simulate(scenario: Scenario, settings: ScalerSettings | None = None) -> Trace:
    """Run the scenario tick by tick with :func:`decide` in the loop."""
    cfg = settings if settings is not None else scenario.settings
    rng = random.Random(scenario.seed)  # noqa: S311 - reproducible noise, not secrecy
    d, span = scenario.service_rate, cfg.tick
    work, concurrency = scenario.initial_work, scenario.start_concurrency
    # A warm start: the first tick sees the traffic already flowing at the starting concurrency
    # (a cold one reads as idle and sends the mapping to the floor before anything happens).
    qps = min(scenario.arrivals(0), concurrency * d)
    memory, throttle, busy = ScalerMemory(), 0.0, qps / d
    records: list[TickRecord] = []
    for i in range(scenario.ticks):
        now = START + i * span
        decision = decide(
            _signals(scenario, now, concurrency, work, busy, qps, throttle), memory, cfg
        )
        memory, concurrency = decision.memory, decision.concurrency
        rate = scenario.arrivals(i)
        if scenario.noise:
            rate *= 1 + scenario.noise * rng.uniform(-1.0, 1.0)
        available = work + rate * span
        attempted = min(available, concurrency * d * span)
        throttle = 0.0
        capacity = scenario.target_capacity
        if capacity is not None and i >= scenario.throttle_from and attempted > capacity * span:
            throttle = (attempted - capacity * span) / attempted
        processed = attempted * (1 - throttle)
        work, qps, busy = available - processed, processed / span, attempted / (d * span)
        records.append(
            TickRecord(
                tick=i,
                time=now,
                arrival_rate=rate,
                work=work,
                concurrency=concurrency,
                busy=busy,
                qps=qps,
                level=decision.level,
                throttle_ratio=throttle,
                reason=decision.reason,
                direction=decision.direction,
                needed=scenario.needed(i),
            )
        )
    return Trace(scenario, tuple(records))


def _signals(
    scenario: Scenario,
    now: float,
    concurrency: int,
    work: float,
    busy: float,
    qps: float,
    throttle: float,
) -> Signals:
    """What the scaler would read at the start of a tick.

    The busy slots hold a batch each: with steady traffic the in-flight count is never zero even
    when the queue keeps up, as in SQS (a model that reads "empty" would fake idleness).
    """
    in_flight = round(busy * scenario.batch)
    queued = round(work)
    age = 0.0 if queued == 0 else min(queued / max(qps, 1.0), MAX_AGE)
    return Signals(
        function=scenario.function,
        now=now,
        concurrency=concurrency,
        queue_depth=queued,
        in_flight=in_flight,
        oldest_age=age,
        backlog=0,
        qps=qps,
        drain_per_slot=scenario.service_rate,
        error_ratio=0.0,
        throttle_ratio=throttle,
        open_breakers=0,
    )


# ------------------------------------------------------------------------------ scenarios


def step(settings: ScalerSettings | None = None, noise: float = 0.0) -> Scenario:
    """Quiet traffic, then ten times more for good: the classic step response."""
    return Scenario(
        name="step",
        description="30 msg/s, then 400 msg/s from tick 5 (needs 40 slots of 10 msg/s)",
        ticks=40,
        arrivals=lambda i: 30.0 if i < 5 else 400.0,
        settled_from=5,
        noise=noise,
        settings=settings or ScalerSettings(),
    )


def ramp(settings: ScalerSettings | None = None, noise: float = 0.0) -> Scenario:
    """Traffic that grows steadily, past ``qps_high``, then levels off."""
    return Scenario(
        name="ramp",
        description="10 -> 1000 msg/s over 30 ticks, then flat (needs 100 slots)",
        ticks=50,
        arrivals=lambda i: 10.0 + 990.0 * min(i, 30) / 30,
        settled_from=30,
        noise=noise,
        settings=settings or ScalerSettings(),
    )


def spike(settings: ScalerSettings | None = None, noise: float = 0.0) -> Scenario:
    """A three-tick burst on quiet traffic: scale up, drain, come back down once."""
    return Scenario(
        name="spike",
        description="50 msg/s with 800 msg/s during ticks 10-12",
        ticks=45,
        arrivals=lambda i: 800.0 if 10 <= i < 13 else 50.0,
        start_concurrency=5,
        settled_from=10,
        noise=noise,
        settings=settings or ScalerSettings(),
    )


def throttling_target(settings: ScalerSettings | None = None, noise: float = 0.0) -> Scenario:
    """A large frontier against a target that starts answering 429 above 300 requests/s."""
    return Scenario(
        name="throttling_target",
        description="300k queued + 200 msg/s; from tick 4 the target serves 300 req/s (30 slots)",
        ticks=90,
        arrivals=lambda _i: 200.0,
        initial_work=300_000.0,
        target_capacity=300.0,
        throttle_from=4,
        settled_from=4,
        noise=noise,
        settings=settings or ScalerSettings(),
    )


SCENARIOS: Final[dict[str, Callable[..., Scenario]]] = {
    "step": step,
    "ramp": ramp,
    "spike": spike,
    "throttling_target": throttling_target,
}
