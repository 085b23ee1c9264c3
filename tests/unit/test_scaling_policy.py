"""The scaler's policy: a table of rules and reasons, then properties over random inputs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stepcrawl.scaling import (
    REASONS,
    Decision,
    ScalerMemory,
    ScalerSettings,
    Signals,
    decide,
    water_level,
)

NOW = 1_700_000_000.0
CFG = ScalerSettings()
# At concurrency 10 and 10 msg/s per slot, one 60 s tick drains 6,000 messages: level = work/6000.


def sig(**changes: Any) -> Signals:
    base: dict[str, Any] = {
        "function": "fetch",
        "now": NOW,
        "concurrency": 10,
        "queue_depth": 3000,
        "in_flight": 0,
        "oldest_age": 0.0,
        "backlog": 0,
        "qps": 200.0,
        "drain_per_slot": 10.0,
        "error_ratio": 0.0,
        "throttle_ratio": 0.0,
        "open_breakers": 0,
    }
    base.update(changes)
    return Signals(**base)


def run(memory: ScalerMemory | None = None, cfg: ScalerSettings = CFG, **changes: Any) -> Decision:
    return decide(sig(**changes), memory or ScalerMemory(), cfg)


# ------------------------------------------------------------------------------ rules


@pytest.mark.parametrize(
    ("changes", "concurrency", "reason"),
    [
        # between the thresholds: the hysteresis band holds
        ({}, 10, "hold"),
        ({"queue_depth": 4800}, 10, "hold"),  # level 0.8 is not above 0.8
        ({"qps": 500.0}, 10, "hold"),  # 500 pages/s is not above 500
        # level 1.0: toward max(ceil(18000/930)=20, ceil(200/8)=25), bounded by 2x per tick
        ({"queue_depth": 6000}, 20, "level_high"),
        ({"queue_depth": 0, "backlog": 6000}, 20, "level_high"),  # the frontier counts
        ({"queue_depth": 5000, "in_flight": 1000}, 20, "level_high"),
        # qps 600 at level 0.5: the demand needs 75 slots at 80%, bounded by 2x per tick
        ({"qps": 600.0}, 20, "qps_high"),
        # qps 600 at concurrency 100: 75 slots are enough already, an up trigger never goes down
        ({"qps": 600.0, "concurrency": 100, "queue_depth": 0}, 100, "headroom"),
        # qps 850 at 100: 107 slots wanted, a 7% change inside the 10% dead band
        ({"qps": 850.0, "concurrency": 100, "queue_depth": 0}, 100, "dead_band"),
        ({"qps": 950.0, "concurrency": 100, "queue_depth": 0}, 119, "qps_high"),
        # little traffic and a low level: toward ceil(50/8)=7, at most halving per tick
        ({"qps": 50.0, "concurrency": 40, "queue_depth": 0}, 20, "low_load"),
        ({"qps": 50.0, "concurrency": 9, "queue_depth": 0}, 7, "low_load"),
        ({"qps": 50.0, "concurrency": 7, "queue_depth": 0}, 7, "hold"),
        # low qps but a level in the band: hold (the down rule needs both)
        ({"qps": 50.0, "concurrency": 10, "queue_depth": 3000}, 10, "hold"),
        # nothing to do: straight to the floor, no halving steps
        ({"qps": 0.0, "concurrency": 400, "queue_depth": 0}, 2, "idle"),
        ({"qps": 0.0, "concurrency": 2, "queue_depth": 0}, 2, "at_min"),
        # a trickle the floor can carry is idle too; a bigger one is not
        ({"qps": 10.0, "concurrency": 400, "queue_depth": 0}, 2, "idle"),
        ({"qps": 60.0, "concurrency": 400, "queue_depth": 0}, 200, "low_load"),
        # the bounds
        ({"concurrency": 1000, "queue_depth": 10**6}, 1000, "at_max"),
        ({"concurrency": 600, "queue_depth": 10**7}, 1000, "level_high"),
        ({"concurrency": 1}, 2, "bounds"),
        ({"concurrency": 0, "queue_depth": 0, "qps": 0.0}, 2, "bounds"),
        ({"concurrency": 1500}, 1000, "bounds"),
    ],
)
def test_load_rules(changes: dict[str, Any], concurrency: int, reason: str) -> None:
    decision = run(**changes)
    assert (decision.concurrency, decision.reason) == (concurrency, reason)
    assert decision.direction == (concurrency > decision.previous) - (
        concurrency < decision.previous
    )


@pytest.mark.parametrize(
    ("changes", "concurrency", "reason"),
    [
        # 20% 429s at 40: the target accepted ~32; keep 80% of that, whatever the backlog
        ({"concurrency": 40, "throttle_ratio": 0.2, "queue_depth": 10**6}, 25, "throttled"),
        ({"concurrency": 40, "error_ratio": 0.3, "queue_depth": 10**6}, 22, "errors"),
        ({"concurrency": 40, "throttle_ratio": 0.3, "error_ratio": 0.2}, 22, "throttled"),
        # a heavy ratio is bounded by halving per tick (one noisy tick must not collapse fetch)
        ({"concurrency": 40, "throttle_ratio": 0.9}, 20, "throttled"),
        ({"concurrency": 2, "throttle_ratio": 0.9}, 2, "at_min"),
        # at the threshold: not above it
        ({"concurrency": 40, "throttle_ratio": 0.05}, 40, "hold"),
        # parse talks to no target: its throttle and error ratios are not the scaler's business
        (
            {"function": "parse", "throttle_ratio": 0.9, "error_ratio": 0.9, "queue_depth": 6000},
            20,
            "level_high",
        ),
    ],
)
def test_target_rules(changes: dict[str, Any], concurrency: int, reason: str) -> None:
    decision = run(**changes)
    assert (decision.concurrency, decision.reason) == (concurrency, reason)


def test_a_throttled_decrease_leaves_a_ceiling_that_holds_then_lapses() -> None:
    down = run(concurrency=40, throttle_ratio=0.2, queue_depth=10**6)
    assert down.memory.ceiling == 25
    assert down.memory.ceiling_until == NOW + CFG.throttle_hold
    # the backlog asks for more, the ceiling says no
    later = NOW + 600
    held = decide(sig(now=later, concurrency=25, queue_depth=10**6), down.memory, CFG)
    assert (held.concurrency, held.reason) == (25, "ceiling")
    assert held.memory.ceiling == 25
    below = decide(sig(now=later, concurrency=20, queue_depth=10**6), down.memory, CFG)
    assert (below.concurrency, below.reason) == (25, "level_high")
    # once it lapses fetch may probe above it again (and the ceiling is forgotten)
    lapsed = NOW + CFG.throttle_hold
    probe = decide(sig(now=lapsed, concurrency=25, queue_depth=10**6), down.memory, CFG)
    assert (probe.concurrency, probe.reason) == (50, "level_high")
    assert probe.memory.ceiling is None


def test_the_ceiling_binds_fetch_only() -> None:
    memory = ScalerMemory(ceiling=10, ceiling_until=NOW + 100)
    assert run(memory, queue_depth=6000).reason == "ceiling"
    assert run(memory, function="parse", queue_depth=6000).concurrency == 20


@pytest.mark.parametrize(
    ("last", "now", "reason"),
    [(0.01, 0.03, "throttle_rising"), (0.03, 0.03, "level_high"), (0.04, 0.03, "level_high")],
)
def test_fetch_never_scales_up_while_the_throttle_ratio_rises(
    last: float, now: float, reason: str
) -> None:
    decision = run(ScalerMemory(last_throttle_ratio=last), queue_depth=6000, throttle_ratio=now)
    assert decision.reason == reason
    assert decision.memory.last_throttle_ratio == now


@pytest.mark.parametrize(
    ("changes", "ago", "reason"),
    [
        # up: 60 s after a change (a schedule firing up to 5 s early still counts)
        ({"queue_depth": 6000}, 30.0, "cooldown"),
        ({"queue_depth": 6000}, 54.0, "cooldown"),
        ({"queue_depth": 6000}, 55.0, "level_high"),
        # down: 180 s after a change
        ({"qps": 50.0, "concurrency": 40, "queue_depth": 0}, 120.0, "cooldown"),
        ({"qps": 50.0, "concurrency": 40, "queue_depth": 0}, 180.0, "low_load"),
        ({"qps": 0.0, "concurrency": 40, "queue_depth": 0}, 120.0, "cooldown"),
        ({"qps": 0.0, "concurrency": 40, "queue_depth": 0}, 180.0, "idle"),
        # throttled: one tick, so that the ratio measured is the current concurrency's
        ({"throttle_ratio": 0.5, "concurrency": 40}, 30.0, "cooldown"),
        ({"throttle_ratio": 0.5, "concurrency": 40}, 60.0, "throttled"),
        # bounds do not wait
        ({"concurrency": 1}, 1.0, "bounds"),
    ],
)
def test_cooldowns(changes: dict[str, Any], ago: float, reason: str) -> None:
    decision = run(ScalerMemory(last_change_at=NOW - ago, last_direction=1), **changes)
    assert decision.reason == reason
    if reason == "cooldown":
        assert decision.concurrency == decision.previous
        assert decision.memory.last_change_at == NOW - ago


def test_a_throttled_tick_in_cooldown_still_caps_increases() -> None:
    memory = ScalerMemory(last_change_at=NOW - 30, last_direction=1)
    decision = run(memory, concurrency=40, throttle_ratio=0.5)
    assert decision.reason == "cooldown"
    assert decision.memory.ceiling == 40


def test_a_change_is_remembered() -> None:
    decision = run(queue_depth=6000)
    assert decision.memory.last_change_at == NOW
    assert decision.memory.last_direction == 1
    held = run(ScalerMemory(last_change_at=NOW - 999, last_direction=-1))
    assert (held.memory.last_change_at, held.memory.last_direction) == (NOW - 999, -1)


def test_demand_is_throughput_corrected_by_the_change_of_the_work() -> None:
    grew = ScalerMemory(last_work=0, last_at=NOW - 60)
    assert run(grew, qps=100.0, queue_depth=6000).demand == pytest.approx(200.0)
    shrank = ScalerMemory(last_work=12000, last_at=NOW - 60)
    assert run(shrank, qps=300.0, queue_depth=6000).demand == pytest.approx(200.0)
    assert run(ScalerMemory(last_work=10**6, last_at=NOW - 60), qps=1.0).demand == 0.0
    # a stale sample (a skipped tick or three) is not trusted
    stale = ScalerMemory(last_work=0, last_at=NOW - 600)
    assert run(stale, qps=100.0, queue_depth=6000).demand == pytest.approx(100.0)


def test_a_drain_not_measured_falls_back_to_the_default() -> None:
    for drain in (None, 0.0, 1e-300):
        decision = run(drain_per_slot=drain)
        assert decision.drain_per_slot == CFG.default_drain_per_slot
        assert decision.level == pytest.approx(0.5)
    assert run(drain_per_slot=20.0).level == pytest.approx(0.25)


def test_scale_down_sizes_on_the_peak_demand_of_the_window() -> None:
    # a quiet tick (qps 20) right after a busier one (demand 90) keeps 12 slots, not 3
    memory = ScalerMemory(peak_demand=90.0, peak_at=NOW - 60)
    decision = run(memory, qps=20.0, concurrency=20, queue_depth=0)
    assert (decision.concurrency, decision.reason) == (12, "low_load")
    assert decision.memory.peak_demand == 90.0
    old = ScalerMemory(peak_demand=90.0, peak_at=NOW - CFG.cooldown_down - 1)
    aged = run(old, qps=20.0, concurrency=20, queue_depth=0)
    assert aged.concurrency == 10
    assert aged.memory.peak_demand == 20.0


def test_settings_bounds_are_the_mapping_s() -> None:
    narrow = ScalerSettings(min_concurrency=5, max_concurrency=50)
    assert run(cfg=narrow, concurrency=80).concurrency == 50
    assert run(cfg=narrow, concurrency=40, queue_depth=10**6).concurrency == 50
    assert run(cfg=narrow, qps=0.0, queue_depth=0).concurrency == 5


def test_water_level() -> None:
    assert water_level(6000, 10, 10.0, 60.0) == 1.0
    assert water_level(600, 0, 10.0, 60.0) == 1.0  # a stopped mapping reads as one slot


# ------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    "bad",
    [
        {"qps_low": 600.0},
        {"level_low": 0.9},
        {"level_target": 0.2},
        {"level_target": 0.9},
        {"min_concurrency": 500, "max_concurrency": 100},
        {"min_concurrency": 1},
        {"max_concurrency": 1001},
        {"throttle_high": 1.5},
        {"max_step_up": 0.5},
        {"tick": 0},
        {"typo": 1},
    ],
)
def test_settings_reject_what_cannot_converge(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ScalerSettings(**bad)


def test_settings_document_every_field_and_are_frozen() -> None:
    for name, info in ScalerSettings.model_fields.items():
        assert info.description, name
    assert CFG.target_level == pytest.approx(0.55)
    assert ScalerSettings(level_target=0.4).target_level == 0.4
    with pytest.raises(ValidationError):
        CFG.qps_high = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("field", ["qps", "queue_depth", "throttle_ratio", "concurrency"])
def test_signals_reject_negative_or_nan(field: str) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        sig(**{field: -1})
    with pytest.raises(ValueError, match="non-negative"):
        sig(**{field: math.nan})


def test_memory_round_trips_and_reads_dynamodb_numbers() -> None:
    memory = ScalerMemory(
        last_change_at=NOW,
        last_direction=-1,
        last_throttle_ratio=0.25,
        ceiling=12,
        ceiling_until=NOW + 1800,
        last_work=42,
        last_at=NOW,
        peak_demand=3.5,
        peak_at=NOW - 60,
    )
    assert ScalerMemory.of(memory.to_item()) == memory
    as_stored = {key: Decimal(str(value)) for key, value in memory.to_item().items()}
    assert ScalerMemory.of({**as_stored, "pk": "scaler#fetch"}) == memory
    assert ScalerMemory.of(None) == ScalerMemory() == ScalerMemory.of({})
    assert ScalerMemory().to_item() == {"last_direction": 0, "last_throttle_ratio": 0.0}


def test_decision_as_dict_is_one_json_log_line() -> None:
    decision = run(queue_depth=6000, open_breakers=3)
    line = json.loads(json.dumps(decision.as_dict()))
    assert line["function"] == "fetch"
    assert (line["previous"], line["concurrency"], line["direction"]) == (10, 20, 1)
    assert line["reason"] == "level_high"
    assert line["level"] == 1.0
    assert line["target"] == 25
    assert line["queue_depth"] == 6000
    assert line["open_breakers"] == 3
    assert line["memory"]["last_change_at"] == NOW


# ------------------------------------------------------------------------------ properties

ratios = st.floats(0, 1, allow_nan=False)
counts = st.integers(0, 2_000_000)


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Signals, ScalerMemory, ScalerSettings]:
    cfg = draw(
        st.sampled_from(
            [
                CFG,
                ScalerSettings(min_concurrency=5, max_concurrency=200),
                ScalerSettings(max_step_up=4.0, max_step_down=0.8, dead_band=0.0),
                ScalerSettings(qps_low=0.0, qps_high=50.0, throttle_high=0.2, clock_slack=0.0),
            ]
        )
    )
    signals = Signals(
        function=draw(st.sampled_from(["fetch", "parse"])),
        now=NOW,
        concurrency=draw(st.integers(0, 1200)),
        queue_depth=draw(counts),
        in_flight=draw(st.integers(0, 20_000)),
        oldest_age=draw(st.floats(0, 1e6)),
        backlog=draw(counts),
        qps=draw(st.floats(0, 5000)),
        drain_per_slot=draw(st.none() | st.floats(0, 200)),
        error_ratio=draw(ratios),
        throttle_ratio=draw(ratios),
        open_breakers=draw(st.integers(0, 100)),
    )
    ago = st.floats(0, 4000)
    memory = ScalerMemory(
        last_change_at=draw(st.none() | ago.map(lambda a: NOW - a)),
        last_direction=draw(st.sampled_from([-1, 0, 1])),
        last_throttle_ratio=draw(ratios),
        ceiling=draw(st.none() | st.integers(2, 1000)),
        ceiling_until=draw(st.none() | ago.map(lambda a: NOW - 2000 + a)),
        last_work=draw(st.none() | counts),
        last_at=draw(st.none() | ago.map(lambda a: NOW - a)),
        peak_demand=draw(st.none() | st.floats(0, 5000)),
        peak_at=draw(st.none() | ago.map(lambda a: NOW - a)),
    )
    return signals, memory, cfg


def in_bounds(s: Signals, cfg: ScalerSettings) -> bool:
    return cfg.min_concurrency <= s.concurrency <= cfg.max_concurrency


PROPERTY = settings(max_examples=120, deadline=None)


@PROPERTY
@given(inputs())
def test_invariants(case: tuple[Signals, ScalerMemory, ScalerSettings]) -> None:
    """Bounds, determinism, the band, and what every load change must clear."""
    s, memory, cfg = case
    decision = decide(s, memory, cfg)
    c, new = s.concurrency, decision.concurrency
    # within bounds, well formed, deterministic
    assert cfg.min_concurrency <= new <= cfg.max_concurrency
    assert decision.reason in REASONS
    assert decision.direction == (new > c) - (new < c)
    assert decision.previous == c
    assert decide(s, memory, cfg) == decision
    json.dumps(decision.as_dict(), allow_nan=False)
    # no change inside the hysteresis band of both thresholds
    calm = s.function != "fetch" or max(s.throttle_ratio, s.error_ratio) <= cfg.throttle_high
    band = cfg.qps_low <= s.qps <= cfg.qps_high and (
        cfg.level_low <= decision.level <= cfg.level_high
    )
    if in_bounds(s, cfg) and calm and band:
        assert (new, decision.reason) == (c, "hold")
    # a load change clears the dead band, respects the step bounds and the cooldowns
    elapsed = math.inf if memory.last_change_at is None else s.now - memory.last_change_at
    if decision.reason in {"qps_high", "level_high"}:
        assert c < new <= math.ceil(c * cfg.max_step_up)
        assert new - c > cfg.dead_band * c
        assert elapsed + cfg.clock_slack >= cfg.cooldown_up
    if decision.reason == "low_load":
        assert new < c
        assert c - new > cfg.dead_band * c
        assert new >= min(c - 1, math.ceil(c * cfg.max_step_down))
        assert elapsed + cfg.clock_slack >= cfg.cooldown_down
    if decision.reason in {"throttled", "errors"}:
        assert new < c
        assert elapsed + cfg.clock_slack >= cfg.cooldown_throttled


@PROPERTY
@given(inputs())
def test_fetch_never_scales_up_into_a_rising_or_high_throttle_ratio(
    case: tuple[Signals, ScalerMemory, ScalerSettings],
) -> None:
    s, memory, cfg = case
    s = replace(s, function="fetch")
    decision = decide(s, memory, cfg)
    rising = s.throttle_ratio > memory.last_throttle_ratio
    high = max(s.throttle_ratio, s.error_ratio) > cfg.throttle_high
    if in_bounds(s, cfg) and (rising or high):
        assert decision.concurrency <= s.concurrency
    if in_bounds(s, cfg) and high:
        assert decision.reason in {"throttled", "errors", "cooldown", "at_min"}


@PROPERTY
@given(inputs(), ratios, ratios)
def test_parse_ignores_throttle_and_errors(
    case: tuple[Signals, ScalerMemory, ScalerSettings], throttle: float, errors: float
) -> None:
    s, memory, cfg = case
    calm = replace(s, function="parse", throttle_ratio=0.0, error_ratio=0.0)
    noisy = replace(calm, throttle_ratio=throttle, error_ratio=errors)
    a, b = decide(calm, memory, cfg), decide(noisy, memory, cfg)
    assert (a.concurrency, a.reason) == (b.concurrency, b.reason)
