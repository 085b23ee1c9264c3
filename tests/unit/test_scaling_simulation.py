"""The policy in the loop: convergence, oscillation and back-off on the modelled scenarios.

The tick counts asserted here are the ones docs/scaling.md states (measured: the step reached
in 4 ticks and drained in 7, the ramp's plateau reached before the ramp ends, the spike reached
in 4 and drained 3 after it ends; throttling: under the target's capacity 2 ticks after it
starts answering 429). The bounds leave one tick of margin so that a tuning change that costs a tick
shows up here, not in production.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stepcrawl.scaling import ScalerSettings
from stepcrawl.scaling.simulation import (
    SCENARIOS,
    Scenario,
    TickRecord,
    Trace,
    needed_concurrency,
    ramp,
    simulate,
    spike,
    step,
    throttling_target,
)

CFG = ScalerSettings()


def level_ok_from(trace: Trace, start: int) -> bool:
    return all(t.level <= CFG.level_high for t in trace.ticks[start:])


def test_step_reaches_the_needed_concurrency_and_stays() -> None:
    scenario = step()
    trace = simulate(scenario)
    needed = scenario.needed(scenario.settled_from)
    assert needed == 40
    assert trace.ticks_to_reach(needed, scenario.settled_from) == 4  # 4, 8, 16, 32, 64
    drained = trace.ticks_to_drain(scenario.settled_from)
    assert drained is not None
    assert drained <= 8  # 7: the backlog of the climb is gone 2 ticks after the cap passes 64
    assert level_ok_from(trace, scenario.settled_from + 7)
    assert all(t.concurrency >= needed for t in trace.ticks[scenario.settled_from + 4 :])
    assert trace.reversals(scenario.settled_from) == 0
    # the cap overshoots by the backlog it had to drain, and no further
    assert trace.peak(scenario.settled_from) <= 2 * needed


def test_ramp_is_tracked_and_the_plateau_reached() -> None:
    scenario = ramp()
    trace = simulate(scenario)
    final = scenario.needed(scenario.ticks - 1)
    assert final == 100
    reached = trace.ticks_to_reach(final, scenario.settled_from)
    assert reached is not None
    assert reached <= 1
    assert trace.reversals() == 0
    # following the ramp, the cap never lags it by more than 25% once it passes qps_high
    passing = next(t.tick for t in trace.ticks if t.arrival_rate > CFG.qps_high)
    assert all(t.concurrency >= 0.75 * t.needed for t in trace.ticks[passing:])
    assert level_ok_from(trace, scenario.settled_from)


def test_spike_scales_up_drains_and_comes_back_down_once() -> None:
    scenario = spike()
    trace = simulate(scenario)
    start = scenario.settled_from
    assert trace.ticks_to_reach(scenario.needed(start), start) == 4
    drained = trace.ticks_to_drain(start + 3)  # from the end of the spike
    assert drained is not None
    assert drained <= 4  # 3
    # down again to what the base traffic needs, with headroom, within 15 ticks of the spike
    assert trace.ticks[start + 15].concurrency <= 2 * scenario.needed(start + 15)
    assert trace.reversals(start) == 1
    assert trace.ticks[-1].concurrency <= 8


def test_throttling_target_backs_off_and_stays_below_its_capacity() -> None:
    scenario = throttling_target()
    trace = simulate(scenario)
    start = scenario.throttle_from
    assert scenario.target_capacity is not None
    capacity_slots = scenario.target_capacity / scenario.service_rate  # 30
    assert trace.ticks[start].throttle_ratio > CFG.throttle_high
    # the concurrency falls as soon as the ratio is seen, and is under the capacity in 2 ticks
    assert trace.ticks[start + 1].concurrency < trace.ticks[start].concurrency
    assert trace.ticks[start + 1].reason == "throttled"
    below = next(t.tick for t in trace.ticks[start:] if t.concurrency < capacity_slots)
    assert below - start <= 2
    # and stays there while the throttle ceiling holds, whatever the backlog (level > 10) says
    hold = int(CFG.throttle_hold / CFG.tick)
    held = trace.ticks[below : start + hold]
    assert all(t.concurrency < capacity_slots for t in held)
    assert all(t.level > CFG.level_high for t in held)
    assert all(t.throttle_ratio == 0.0 for t in held)
    # afterwards at most one tick of 429s per ceiling period: the probe
    throttled = [t.tick for t in trace.ticks[below:] if t.throttle_ratio > CFG.throttle_high]
    assert len(throttled) <= len(trace.ticks[below:]) // hold + 1


def test_without_the_throttle_rule_the_target_is_hammered() -> None:
    """The same scenario for a function the policy does not throttle: the test above can fail."""
    scenario = replace(throttling_target(), function="parse")
    trace = simulate(scenario)
    late = trace.ticks[scenario.throttle_from + 3 : scenario.throttle_from + 30]
    assert all(t.throttle_ratio > 0.5 for t in late)
    assert min(t.concurrency for t in late) > 30


@pytest.mark.parametrize("make", [step, spike])
@pytest.mark.parametrize("seed", range(5))
def test_noise_does_not_make_it_oscillate(make: object, seed: int) -> None:
    assert callable(make)
    scenario: Scenario = replace(make(noise=0.1), seed=seed)
    trace = simulate(scenario)
    assert trace.reversals(scenario.settled_from) <= 1
    start = scenario.settled_from
    assert trace.ticks_to_reach(scenario.needed(start), start) == 4


def test_every_scenario_stays_in_bounds_and_is_deterministic() -> None:
    for name, make in SCENARIOS.items():
        scenario = make()
        assert scenario.name == name
        trace = simulate(scenario)
        assert trace == simulate(scenario)
        assert len(trace.ticks) == scenario.ticks
        assert all(CFG.min_concurrency <= t.concurrency <= CFG.max_concurrency for t in trace.ticks)
        assert all(t.work >= 0 for t in trace.ticks)


def test_settings_passed_to_simulate_win() -> None:
    tight = ScalerSettings(max_concurrency=20)
    trace = simulate(step(), tight)
    assert trace.peak() == 20


def test_needed_concurrency_is_bounded() -> None:
    assert needed_concurrency(400.0, 10.0, CFG) == 40
    assert needed_concurrency(401.0, 10.0, CFG) == 41
    assert needed_concurrency(0.0, 10.0, CFG) == 2
    assert needed_concurrency(1e9, 10.0, CFG) == 1000


def test_reversals_count_changes_of_direction() -> None:
    def tick(i: int, direction: int) -> TickRecord:
        return TickRecord(i, 0.0, 0.0, 0.0, 2, 0.0, 0.0, 0.0, 0.0, "hold", direction, 2)

    trace = Trace(step(), tuple(tick(i, d) for i, d in enumerate([1, 0, 1, -1, 0, -1, 1, 0])))
    assert trace.reversals() == 2
    assert trace.reversals(start=4) == 1
